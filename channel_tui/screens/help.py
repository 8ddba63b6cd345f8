"""F1: every key, in one place."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

KEYS = [
    ("Enter", "Send the message (queued while a reply streams)"),
    ("Ctrl+J / Shift+Enter", "New line in the message"),
    ("↑ / ↓", "Recall earlier prompts (from the first / last line)"),
    ("Esc", "Stop the reply being generated (it is kept, marked cancelled)"),
    ("Ctrl+S", "Save the working state now (shows saved, unchanged or failed)"),
    ("Ctrl+R", "Restore the last snapshot now and rebuild the transcript"),
    ("Ctrl+N", "New session"),
    ("Ctrl+O", "Session list: switch to another session (it boots warm)"),
    ("Ctrl+E", "Export the transcript to Markdown"),
    ("Ctrl+B", "Boot comparison: cold against warm, side by side"),
    ("F2", "Show or hide the ring view (the model's working memory)"),
    ("F1", "This help"),
    ("Ctrl+Q / Ctrl+C", "Quit: the working state is saved first"),
]

ABOUT = (
    "Channel keeps the model's working memory (its K/V ring) across restarts: quitting saves "
    "a snapshot, and the next start restores it in milliseconds (a warm boot) instead of "
    "re-reading the whole conversation (a cold boot)."
)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,f1,q", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box", classes="dialog") as box:
            box.border_title = "Channel · keys"
            table: DataTable = DataTable(id="help-keys", cursor_type="none",
                                         show_header=False, zebra_stripes=True)
            table.add_columns("Key", "What it does")
            for key, what in KEYS:
                table.add_row(key, what)
            yield table
            yield Static(ABOUT, id="help-about")
            yield Static("Esc closes", classes="dialog-hint")

    def action_dismiss(self) -> None:
        self.dismiss(None)
