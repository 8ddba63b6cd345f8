"""Before sending a message larger than the ring: say in plain words that the model will
forget its oldest part, and let the user send it anyway or go back and shorten it.

The app cannot count tokens (the tokenizer lives in the engine), so the size is an estimate,
about four characters a token for English text, and the dialog says so.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

CHARS_PER_TOKEN = 4  # a rough average for English text with a BPE tokenizer


def estimated_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def too_long(text: str, ring_slots: int | None) -> bool:
    """Whether `text` alone (by the estimate) is more than the ring holds."""
    return bool(ring_slots) and estimated_tokens(text) > ring_slots  # type: ignore[operator]


def warning_text(text: str, ring_slots: int) -> str:
    return (f"This message is about {estimated_tokens(text):,} tokens (an estimate: "
            f"{len(text):,} characters); the model keeps {ring_slots:,}. The oldest part of "
            "it, and everything said before it, will be forgotten.")


class LongMessageScreen(ModalScreen[bool]):
    BINDINGS = [
        Binding("enter", "send", "Send anyway"),
        Binding("escape", "cancel", "Cancel"),
    ]

    def __init__(self, text: str, ring_slots: int) -> None:
        super().__init__()
        self.message = warning_text(text, ring_slots)

    def compose(self) -> ComposeResult:
        with Vertical(id="long-box", classes="dialog") as box:
            box.border_title = "A long message"
            yield Static(self.message, id="long-text")
            yield Static("Enter sends it anyway · Esc goes back to edit it",
                         classes="dialog-hint")

    def action_send(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)
