"""Ctrl+O: every session in the data directory; Enter switches to one (it boots warm).

The search line filters the rows as one types, by name at once and by message text as soon as
a thread has read the streams (engine/session/search.py). F2 renames the highlighted
session, Delete moves it to the trash in the data directory (after a Y), and U brings the
last one deleted here back. The session open in this Channel is refused for both: the
engine holds its files (switch to another first); one open in another Channel is refused
by its lock, in one line.
"""

from __future__ import annotations

import time
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Input, Static

from engine.session.manage import (
    FAILURES,
    TrashEntry,
    delete_session,
    rename_session,
    restore_deleted,
    session_exists,
)
from engine.session.search import StreamTexts, search_sessions

from .. import format as fmt
from ..sessions import SessionInfo, list_sessions
from ..settings import load_settings, summary

LAST_WIDTH = 18  # the last message column; a search's excerpt fits it, the match in view
HINT = ("Enter opens · / searches · F2 renames · Del deletes · U restores the last deleted · "
        "Ctrl+N new · Esc closes")


class SessionListScreen(ModalScreen[str | None]):
    CSS_PATH = "sessions.tcss"
    BINDINGS = [
        Binding("escape", "dismiss_none", "Close"),
        Binding("ctrl+n", "new", "New session"),
        Binding("slash", "search", "Search", show=False),
        Binding("down", "to_table", show=False),  # from the search line to the rows
        Binding("f2,r", "rename", "Rename"),
        Binding("delete,d", "delete", "Delete"),
        Binding("u", "undo_delete", "Restore the last deleted"),
    ]

    def __init__(self, data_dir: Path, current: str, now: float | None = None) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.current = current
        self.now = now
        self.sessions: list[SessionInfo] = []
        self.shown: list[str] = []  # the rows' names, in order
        self.last_deleted: TrashEntry | None = None
        self.texts = StreamTexts()  # the streams' messages, read once while the list is open

    def compose(self) -> ComposeResult:
        with Vertical(id="sessions-box", classes="dialog") as box:
            box.border_title = "Sessions"
            yield Input(id="sessions-search", placeholder="Search names and messages (/)")
            yield DataTable(id="sessions-table", cursor_type="row", zebra_stripes=True)
            yield Static("", id="sessions-empty")
            yield Static(HINT, classes="dialog-hint")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_column("", key="mark")
        table.add_column("Name", key="name")
        table.add_column("Last message", key="last", width=LAST_WIDTH)
        table.add_column("Model", key="model")
        table.add_column("Settings", key="settings")
        table.add_column("Size", key="size")
        table.add_column("Last saved", key="saved")
        self.reload(select=self.current)
        table.focus()

    # -- rows -----------------------------------------------------------------------------
    def reload(self, select: str | None = None) -> None:
        """Read the sessions again and show those the search line lets through."""
        now = self.now if self.now is not None else time.time()
        self.sessions = list_sessions(self.data_dir)
        if not any(s.name == self.current for s in self.sessions):
            # Not on disk yet, but its settings may be (saved before its first message).
            self.sessions.insert(0, SessionInfo(self.current, "", 0, None, now, summary(
                load_settings(self.data_dir, self.current)[0])))
        self.filter(self.query_one("#sessions-search", Input).value, select)

    def filter(self, text: str, select: str | None = None) -> None:
        """Names at once; message text when the search thread answers (searched)."""
        needle = text.strip().casefold()
        matches = {s.name: "" for s in self.sessions if needle in s.name.casefold()}
        self.show_rows(matches, select)
        if needle:
            self.search(text)

    @work(thread=True, exclusive=True, group="search", exit_on_error=False)
    def search(self, text: str) -> None:
        hits = {hit.session: hit.excerpt for hit in search_sessions(
            self.data_dir, text, width=LAST_WIDTH, texts=self.texts)}
        self.app.call_from_thread(self.searched, text, hits)

    def searched(self, text: str, hits: dict[str, str]) -> None:
        search = self.query("#sessions-search")  # empty once the list has closed
        if search and search.first(Input).value == text:  # and not typed over since
            self.show_rows(hits)

    def show_rows(self, matches: dict[str, str], select: str | None = None) -> None:
        """The sessions named in `matches`; a message's excerpt replaces its last message."""
        now = self.now if self.now is not None else time.time()
        table = self.query_one(DataTable)
        select = select or self.highlighted()
        table.clear()
        self.shown = []
        for info in self.sessions:
            if info.name not in matches:
                continue
            table.add_row("●" if info.name == self.current else "", info.name,
                          _fit(matches[info.name] or info.last_message, LAST_WIDTH),
                          _fit(info.model or "-", 16), _fit(info.settings, 14),
                          fmt.size(info.size_bytes),
                          fmt.ago(info.last_saved, now) if info.last_saved else "never",
                          key=info.name)
            self.shown.append(info.name)
        empty = self.query_one("#sessions-empty", Static)
        empty.update("No session matches." if not self.shown else "")
        empty.display = not self.shown
        if select in self.shown:
            table.move_cursor(row=self.shown.index(select))

    def highlighted(self) -> str | None:
        table = self.query_one(DataTable)
        row = table.cursor_row
        return self.shown[row] if 0 <= row < len(self.shown) else None

    @on(Input.Changed, "#sessions-search")
    def typed(self, event: Input.Changed) -> None:
        self.filter(event.value)

    @on(Input.Submitted, "#sessions-search")
    def open_first(self) -> None:
        if (name := self.highlighted()) is not None:
            self.dismiss(name)

    @on(DataTable.RowSelected)
    def selected(self, event: DataTable.RowSelected) -> None:
        self.dismiss(event.row_key.value)

    def action_search(self) -> None:
        self.query_one("#sessions-search", Input).focus()

    def action_to_table(self) -> None:
        self.query_one(DataTable).focus()

    # -- rename, delete, restore ------------------------------------------------------------
    def _movable(self, verb: str) -> str | None:
        """The highlighted session, if it may be renamed or deleted (else a note says why)."""
        name = self.highlighted()
        if name is not None and name == self.current:
            self.notify(f"{name!r} is open here: switch to another session first, then "
                        f"{verb} it.", severity="warning")
            return None
        return name

    def action_rename(self) -> None:
        from .new_session import NewSessionScreen

        if (old := self._movable("rename")) is None:
            return

        def taken(new: str) -> str | None:
            return f"{new!r} is taken: choose another name." if session_exists(
                self.data_dir, new) else None

        def chosen(new: str | None) -> None:
            if new and new != old and self._do(rename_session, self.data_dir, old, new):
                self.notify(f"Renamed {old!r} to {new!r}.")
                self.reload(select=new)

        self.app.push_screen(NewSessionScreen(self.data_dir, title=f"Rename {old!r}",
                                              value=old, refuse=taken,
                                              hint="Enter renames it · Esc cancels"), chosen)

    def action_delete(self) -> None:
        from .confirm import ConfirmScreen

        if (name := self._movable("delete")) is None:
            return

        def answered(yes: bool | None) -> None:
            if yes and (entry := self._do(delete_session, self.data_dir, name)):
                self.last_deleted = entry
                self.notify(f"Deleted {name!r}: U here restores it (or later: channel sessions "
                            f"restore {entry.entry}).", timeout=8)
                self.reload()

        self.app.push_screen(ConfirmScreen(
            "Delete session", f"Delete {name!r}?",
            "Its files go to the trash in the data directory (.trash); U in this list "
            "brings it back.", yes="Delete"), answered)

    def action_undo_delete(self) -> None:
        entry = self.last_deleted
        if entry is None:
            self.notify("Nothing deleted here to restore (channel sessions trash lists "
                        "older ones).", severity="warning")
            return
        if self._do(restore_deleted, self.data_dir, entry.entry):
            self.last_deleted = None
            self.notify(f"Restored {entry.name!r}.")
            self.reload(select=entry.name)

    def _do(self, operation, *args):
        """Run a file operation; its result, or None after a one-line error."""
        try:
            return operation(*args) or True
        except FAILURES as exc:
            self.notify(str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                        severity="error", timeout=8)
            return None

    # -- the rest ---------------------------------------------------------------------------
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
