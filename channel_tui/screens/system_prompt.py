"""A changed system prompt: it cannot apply in place, so say why and offer where it goes.

The prompt is pinned at the head of the model's working memory (the ring's anchors), and
every K/V after it was computed with the old one in view. The person picks a fork of this
session that reads the conversation again under the new prompt, or the sessions made from
now on (channel_tui/system_prompt.py), or keeps things as they are.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

FORK, NEW_SESSIONS = "fork", "new-sessions"


def explanation(session: str, messages: int) -> str:
    read_again = (f"its {messages:,} messages are read again under the new prompt"
                  if messages else "it has no messages yet, so nothing is read again")
    return (f"The system prompt of {session!r} is pinned at the head of the model's memory, "
            "and everything after it was computed with it in view, so it cannot change in "
            f"place. A fork of the session starts from the new prompt ({read_again}); or new "
            "sessions can start from it.")


class SystemPromptScreen(ModalScreen[str | None]):
    """Dismissed with FORK, NEW_SESSIONS, or None (keep the prompt as it is)."""

    CSS_PATH = "system_prompt.tcss"
    BINDINGS = [
        Binding("f", f"choose('{FORK}')", "Fork with it"),
        Binding("n", f"choose('{NEW_SESSIONS}')", "New sessions"),
        Binding("escape", "choose(None)", "Keep the current one"),
    ]

    def __init__(self, session: str, new_prompt: str, messages: int) -> None:
        super().__init__()
        self.session = session
        self.new_prompt = new_prompt
        self.messages = messages

    def compose(self) -> ComposeResult:
        with Vertical(id="system-box", classes="dialog") as box:
            box.border_title = "New system prompt"
            yield Static(explanation(self.session, self.messages), id="system-why")
            yield Static(self.new_prompt, id="system-new", markup=False)
            with Horizontal(id="system-buttons"):
                yield Button("Fork with it (F)", id=FORK, variant="primary")
                yield Button("Use for new sessions (N)", id=NEW_SESSIONS)
                yield Button("Keep the current one (Esc)", id="keep")

    def on_mount(self) -> None:
        self.query_one(f"#{FORK}", Button).focus()

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id if event.button.id in (FORK, NEW_SESSIONS) else None)

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)
