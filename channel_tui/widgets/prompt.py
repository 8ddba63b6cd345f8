"""The message box: Enter sends, Ctrl+J (or Shift/Alt+Enter) adds a line, Ctrl+↑/↓ recall
earlier prompts (so does ↑ on the first line of a draft); ↑ in an empty box goes up to the
messages."""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import TextArea


class Prompt(TextArea):
    BINDINGS = [
        Binding("ctrl+j,shift+enter,alt+enter", "newline", "Newline", show=False,
                id="newline", tooltip="New line in the message"),
        Binding("ctrl+up", "recall(-1)", "Earlier prompt", show=False, id="recall-earlier",
                tooltip="Recall the prompt sent before"),
        Binding("ctrl+down", "recall(1)", "Later prompt", show=False, id="recall-later",
                tooltip="Recall the prompt sent after"),
    ]

    @dataclass
    class UpFromEmpty(Message):
        """↑ in an empty box: the person wants the messages above."""

        prompt: Prompt

    @dataclass
    class Submitted(Message):
        prompt: Prompt
        text: str

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002 (Textual's name)
        super().__init__(id=id, soft_wrap=True, show_line_numbers=False, tab_behavior="focus",
                         compact=True, placeholder="Message the model · Enter sends · "
                         "Ctrl+J new line · ↑ messages · Ctrl+↑ earlier prompts")
        self.past_prompts: list[str] = []
        self._recall: int | None = None  # index into history while browsing it
        self._draft = ""  # what was typed before browsing began, restored past the newest

    async def _on_key(self, event: events.Key) -> None:
        # Runs before TextArea's own handler, which would insert a newline for Enter;
        # prevent_default stops that base-class handler.
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.post_message(self.Submitted(self, self.text))

    def action_newline(self) -> None:
        self.replace("\n", *self.selection)

    def remember(self, text: str) -> None:
        if text.strip() and (not self.past_prompts or self.past_prompts[-1] != text):
            self.past_prompts.append(text)
        self._recall = None

    def action_cursor_up(self, select: bool = False) -> None:
        if not select and self._recall is None and not self.text:
            self.post_message(self.UpFromEmpty(self))
        elif select or self.cursor_location[0] > 0 or not self.past_prompts:
            super().action_cursor_up(select)
        else:
            self.action_recall(-1)

    def action_cursor_down(self, select: bool = False) -> None:
        last_row = self.document.line_count - 1
        if select or self._recall is None or self.cursor_location[0] < last_row:
            super().action_cursor_down(select)
        else:
            self.action_recall(1)

    def action_recall(self, delta: int) -> None:
        """Step through the prompts sent before; past the newest, the draft comes back."""
        if self._recall is None:
            if delta > 0 or not self.past_prompts:
                return
            self._draft, self._recall = self.text, len(self.past_prompts)
        self._recall = max(0, self._recall + delta)
        if self._recall >= len(self.past_prompts):
            self._recall = None
            self._show(self._draft)
        else:
            self._show(self.past_prompts[self._recall])

    def _show(self, text: str) -> None:
        self.load_text(text)
        self.move_cursor(self.document.end)
