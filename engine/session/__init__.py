"""A named session on disk: the stream log, the transcript, the turn points undo rolls back
to, boot (warm or cold) and fork, and Session, which keeps them and the state in step.
"""
