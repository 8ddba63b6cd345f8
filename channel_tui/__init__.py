"""Channel's Textual front end.

It spawns the engine (`python -m engine`) as a child process and talks to it only through the
line-delimited JSON protocol of docs/protocol.md. It imports nothing but the standard library,
Textual and platformdirs, so that it starts fast (no numpy, no engine internals).
"""
