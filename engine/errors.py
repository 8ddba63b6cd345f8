"""Named errors. Each carries a one-line message meant to be shown to a person as-is."""


class ChannelError(Exception):
    """Base for every error the engine reports to a user without a traceback."""


class ModelError(ChannelError):
    """The model file cannot be used."""


class ModelNotFoundError(ModelError):
    pass


class NotGGUFError(ModelError):
    pass


class UnsupportedArchitectureError(ModelError):
    pass


class UnsupportedTensorTypeError(ModelError):
    pass


class MissingTensorError(ModelError):
    pass


class ModelFileChangedError(ModelError):
    """A model file the engine reads through a mapping was truncated or rewritten in place
    while in use: reading it on would read other bytes, or kill the process (SIGBUS)."""


class TruncatedModelError(ModelError):
    """The GGUF is shorter than its tensor table says (an interrupted download)."""


class WeightImageError(ChannelError):
    """The cached weight image is missing, stale or damaged (it is rebuilt)."""


class LayoutError(ChannelError):
    """An arena layout was built or used incorrectly."""


class LayoutSealedError(LayoutError):
    pass


class StaleViewError(ChannelError):
    """A view of a state arena was used after the arena was reset or restored."""


class StreamError(ChannelError):
    """The session's stream log cannot be read or written."""


class UnusableFileError(ChannelError):
    """A file the engine must open is not a regular file it may use: a directory, a symbolic
    link (never followed), a FIFO, or unreadable. The message names the file and why."""


class SessionBusyError(ChannelError):
    """Another Channel holds the session open: a session has one writer at a time
    (engine/session/owner.py). `pid` is the holder's process id, None if it is not known."""

    def __init__(self, session: str, pid: int | None, hint: str | None = None):
        holder = f" (pid {pid})" if pid is not None else ""
        then = f"; {hint}" if hint else ""
        super().__init__(f"session {session!r} is open in another Channel{holder}{then}")
        self.session = session
        self.pid = pid
