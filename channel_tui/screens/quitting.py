"""Shown while the engine flushes the working state on quit."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import LoadingIndicator, Static


class QuittingScreen(ModalScreen[None]):
    def compose(self) -> ComposeResult:
        with Vertical(id="quit-box", classes="dialog"):
            yield Static("Saving working state…", id="quit-title")
            yield LoadingIndicator()
            yield Static("", id="quit-status", markup=False)

    def set_status(self, text: str) -> None:
        self.query_one("#quit-status", Static).update(text)
