"""Named sessions: the stream log, the transcript, a Session keeping them and the state in
step, and the engine process's per-session runtime, stream watcher and boot comparison.
"""
