"""The engine process (`python -m engine`): its request loop, the line-delimited JSON protocol
(docs/protocol.md), and a small standard-library client.
"""
