"""A thinking model's reasoning, folded to one dim line above the answer; a click (or Enter on
the focused reply) opens it, as dim plain text: reasoning is a draft, not something to lay
out as Markdown."""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from ..reasoning import Reasoned


def fold_line(parts: Reasoned, streaming: bool, opened: bool) -> str:
    """'▸ Thought for 123 words'; while the model is still at it, 'Thinking… (N words)'."""
    arrow = "▾" if opened else "▸"
    words = f"{parts.words:,} word" + ("" if parts.words == 1 else "s")
    if parts.still_thinking and streaming:
        return f"{arrow} Thinking… ({words})"
    return f"{arrow} Thought for {words}"


class ReasoningFold(Vertical):
    """The folded line and, opened (CSS class `open`), the reasoning under it."""

    def __init__(self, parts: Reasoned, streaming: bool = False) -> None:
        super().__init__(classes="reasoning-fold")
        self.parts = parts
        self.streaming = streaming
        self.tooltip = "Click (or Enter on the focused reply) to show the reasoning"

    @property
    def opened(self) -> bool:
        return self.has_class("open")

    def compose(self) -> ComposeResult:
        yield Static(fold_line(self.parts, self.streaming, False), markup=False,
                     classes="fold-line")
        yield Static("", markup=False, classes="fold-body")

    def set_parts(self, parts: Reasoned, streaming: bool) -> None:
        self.parts, self.streaming = parts, streaming
        self.query_one(".fold-line", Static).update(fold_line(parts, streaming, self.opened))
        if self.opened:  # folded, the body is not drawn: no need to refill it each token
            self.query_one(".fold-body", Static).update(parts.reasoning or "")

    def toggle_open(self) -> None:
        self.toggle_class("open")
        self.set_parts(self.parts, self.streaming)

    def on_click(self, event: events.Click) -> None:
        event.stop()  # the click is for the fold, not for the reply around it
        self.toggle_open()
