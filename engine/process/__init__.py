"""The process serving sessions (`python -m engine`): its request loop, the line-delimited
JSON protocol (docs/protocol.md), each open session's runtime and stream watcher, which model
each session runs on, and a small standard-library client.
"""
