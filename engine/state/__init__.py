"""One conversation's numerical state: the checked byte layout, the arena it backs, the K/V
ring, the sampler, and Conversation, which drives them through a backend's forward pass.
"""
