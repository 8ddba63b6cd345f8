"""The app's own keys (beside the chat screen's), in a module of their own so that the help
screen and the README's key table read them without importing the app."""

from __future__ import annotations

from textual.binding import Binding

APP_BINDINGS = [
    Binding("ctrl+q", "quit", "Quit", priority=True, id="quit",
            tooltip="Quit: the working state is saved first"),
    Binding("ctrl+c", "copy_or_quit", "Copy", show=False, priority=True, id="quit-alt",
            tooltip="Copy the selected text; with nothing selected, quit as Ctrl+Q"),
    Binding("f1", "help", "Help", id="help", tooltip="Every key, in one place"),
]
