"""Ctrl+N: name a new session (a free name is suggested)."""

from __future__ import annotations

import time
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.validation import Function
from textual.widgets import Input, Static

from ..options import valid_session_name
from ..sessions import list_sessions


def suggest_name(data_dir: Path, base: str | None = None) -> str:
    taken = {s.name for s in list_sessions(data_dir)}
    base = base or time.strftime("chat-%Y%m%d")
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    return name


class NewSessionScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "dismiss_none", "Cancel")]

    def __init__(self, data_dir: Path, title: str = "New session",
                 suggestion_base: str | None = None) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.title_text = title
        self.suggestion_base = suggestion_base

    def compose(self) -> ComposeResult:
        with Vertical(id="new-box", classes="dialog") as box:
            box.border_title = self.title_text
            yield Static("Name (letters, digits, '.', '_', '-'):")
            yield Input(suggest_name(self.data_dir, self.suggestion_base), id="new-name",
                        validators=[Function(valid_session_name,
                                             "1-64 letters, digits, '.', '_' or '-'")])
            yield Static("", id="new-error")
            yield Static("Enter opens it · Esc cancels", classes="dialog-hint")

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        name = event.value.strip()
        if not valid_session_name(name):
            self.query_one("#new-error", Static).update(
                "Use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit.")
            return
        self.dismiss(name)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
