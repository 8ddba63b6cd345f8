"""One conversation's numerical state: the checked byte layout, the arena it backs, the K/V
ring with its sizing and eviction policies, and the sampler. Conversation
(engine/conversation.py) drives them through a backend's forward pass.
"""
