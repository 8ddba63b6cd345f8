"""When the session is open in another Channel: say so in one line, and offer a way on.

A session has one writer at a time (the engine's `open` answers `session_busy`, naming the
holder's pid: docs/protocol.md). The holder goes on answering it, and `channel send` adds to it
from outside. Here the person can open a fork of it (a copy of its state as last saved, which
goes its own way), open another session, or quit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from .chat_answers import Answer, ends_with

if TYPE_CHECKING:
    from engine.process.events import Error, Forked

    from .chat import ChatScreen

FORK, OTHER, QUIT = "fork", "other", "quit"
HINT = "Its holder goes on answering it; channel send adds a message to it from outside."


class SessionBusyScreen(ModalScreen[str]):
    """The refusal and three ways on; dismissed with FORK, OTHER or QUIT (no Esc: the
    screen below has no open session to go back to)."""

    CSS_PATH = "session_busy.tcss"
    BINDINGS = [
        Binding("f", f"choose('{FORK}')", "Open a fork"),
        Binding("o", f"choose('{OTHER}')", "Other session"),
        Binding("q", f"choose('{QUIT}')", "Quit"),
    ]

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def compose(self) -> ComposeResult:
        with Vertical(id="busy-box", classes="dialog") as box:
            box.border_title = "Session in use"
            yield Static(self.message, id="busy-message", markup=False)
            yield Static(HINT, classes="dialog-hint", markup=False)
            with Horizontal(id="busy-buttons"):
                yield Button("Open a fork (F)", id=FORK, variant="primary")
                yield Button("Other session (O)", id=OTHER)
                yield Button("Quit (Q)", id=QUIT, variant="error")

    def on_mount(self) -> None:
        self.query_one(f"#{FORK}", Button).focus()

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id)

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice)


def session_busy_flow(chat: ChatScreen, message: str) -> None:
    """Show the refusal of `chat.session`, then open what the person picks instead. Going
    back from the name or the list asks again: nothing is open until something is."""
    from .new_session import NewSessionScreen
    from .sessions import SessionListScreen

    busy, data_dir = chat.session, chat.data_dir()
    chat.banner.show(f"⚠ {message}", "Open a fork of it, or another session.", "error")

    def ask() -> None:
        chat.app.push_screen(SessionBusyScreen(message), chosen)

    async def chosen(choice: str | None) -> None:
        if choice == FORK:
            chat.app.push_screen(NewSessionScreen(data_dir, title=f"Fork {busy!r}",
                                                  suggestion_base=f"{busy}-fork"), fork_as)
        elif choice == OTHER:
            chat.app.push_screen(SessionListScreen(data_dir, busy), open_other)
        else:
            chat.fatal_message = message  # said again on the terminal at exit (status 2)
            await chat.app.action_quit()

    def fork_as(name: str | None) -> None:
        # The fork's own answer: the table's `forked` would close the source first, and
        # this engine never opened it.
        answer = Answer({"forked": forked, "error": fork_failed}, ends_with("forked"))
        if not name or chat.send("fork", answer, session=busy, new=name) is None:
            ask()

    async def forked(event: Forked) -> None:
        chat.notify(f"Forked {busy!r} as {event.get('new')!r}; opening the fork",
                    title="Fork")
        chat.open_session(event.get("new", ""))

    async def fork_failed(event: Error) -> None:
        chat.notify(f"Fork failed: {event.get('message', 'unknown error')}",
                    severity="error")
        ask()

    def open_other(name: str | None) -> None:
        if name:
            chat.open_session(name)
        else:
            ask()

    ask()
