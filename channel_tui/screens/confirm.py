"""A yes-or-no question before something the person may regret (deleting a session)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class ConfirmScreen(ModalScreen[bool]):
    """Dismissed with True for Y or Enter, False for N or Esc."""

    CSS_PATH = "confirm.tcss"
    BINDINGS = [
        Binding("y,enter", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, title: str, question: str, detail: str, yes: str = "Yes") -> None:
        super().__init__()
        self.title_text = title
        self.question = question
        self.detail = detail
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box", classes="dialog") as box:
            box.border_title = self.title_text
            yield Static(self.question, id="confirm-question", markup=False)
            yield Static(self.detail, markup=False)
            yield Static(f"Y or Enter: {self.yes.lower()} · N or Esc: cancel",
                         classes="dialog-hint")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
