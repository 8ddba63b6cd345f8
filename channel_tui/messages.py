"""Messages the engine client posts to the app (dataclasses, as Textual allows)."""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.message import Message


@dataclass
class EngineEvent(Message):
    """One JSON event line from the engine's stdout."""

    event: dict
    generation: int  # which engine process sent it; events of a replaced process are dropped


@dataclass
class EngineExited(Message):
    """The engine process is gone (or never started)."""

    generation: int
    returncode: int | None
    stderr_tail: list[str] = field(default_factory=list)
    spawn_error: str | None = None  # set when the process could not be started at all


@dataclass
class QuitRequested(Message):
    """SIGTERM or SIGHUP arrived: quit exactly as Ctrl+Q does (flush first)."""

    reason: str


# The app forwards engine news to the chat screen as these, so that the screen handles them
# one at a time in its own queue, in order with the user's input (Prompt.Submitted).
@dataclass
class SessionEvent(Message, bubble=False):
    event: dict


@dataclass
class EngineLost(Message, bubble=False):
    """The engine exited unexpectedly and is being restarted."""

    description: str
    stderr_tail: list[str] = field(default_factory=list)


@dataclass
class EngineFatal(Message, bubble=False):
    """The engine cannot serve; it will not be restarted."""

    message: str
    detail: str = ""


# What the widgets of the transcript ask of the chat screen.
@dataclass
class CopyRequested(Message):
    """Copy `text` out of the app; `what` names it in the toast ('the python code block')."""

    text: str
    what: str


@dataclass
class LeaveTranscript(Message):
    """Focus went past the newest message (↓): back to the prompt."""
