"""Ctrl+O: every session in the data directory; Enter switches to one (it boots warm)."""

from __future__ import annotations

import time
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from .. import format as fmt
from ..sessions import SessionInfo, list_sessions
from ..settings import load_settings, summary


class SessionListScreen(ModalScreen[str | None]):
    BINDINGS = [
        Binding("escape", "dismiss_none", "Close"),
        Binding("ctrl+n", "new", "New session"),
    ]

    def __init__(self, data_dir: Path, current: str, now: float | None = None) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.current = current
        self.now = now
        self.sessions: list[SessionInfo] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="sessions-box", classes="dialog") as box:
            box.border_title = "Sessions"
            yield DataTable(id="sessions-table", cursor_type="row", zebra_stripes=True)
            yield Static("", id="sessions-empty")
            yield Static("Enter opens · Ctrl+N new · Esc closes", classes="dialog-hint")

    def on_mount(self) -> None:
        now = self.now if self.now is not None else time.time()
        self.sessions = list_sessions(self.data_dir)
        if not any(s.name == self.current for s in self.sessions):
            # Not on disk yet, but its settings may be (saved before its first message).
            self.sessions.insert(0, SessionInfo(self.current, "", 0, None, now, summary(
                load_settings(self.data_dir, self.current)[0])))
        table = self.query_one(DataTable)
        table.add_column("", key="mark")
        table.add_column("Name", key="name")
        table.add_column("Last message", key="last", width=24)
        table.add_column("Settings", key="settings")
        table.add_column("Size", key="size")
        table.add_column("Last saved", key="saved")
        for info in self.sessions:
            last = _fit(info.last_message, 24)
            table.add_row("●" if info.name == self.current else "", info.name, last,
                          _fit(info.settings, 20), fmt.size(info.size_bytes),
                          fmt.ago(info.last_saved, now) if info.last_saved else "never",
                          key=info.name)
        self.query_one("#sessions-empty", Static).display = False
        table.focus()
        index = next((i for i, s in enumerate(self.sessions) if s.name == self.current), 0)
        table.move_cursor(row=index)

    @on(DataTable.RowSelected)
    def selected(self, event: DataTable.RowSelected) -> None:
        self.dismiss(event.row_key.value)

    def action_new(self) -> None:
        from .new_session import NewSessionScreen

        def chosen(name: str | None) -> None:
            if name:
                self.dismiss(name)

        self.app.push_screen(NewSessionScreen(self.data_dir, ask_system_prompt=True), chosen)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
