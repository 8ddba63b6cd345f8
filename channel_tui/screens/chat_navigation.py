"""Moving about the conversation and copying out of it (a mixin of ChatScreen).

The transcript scrolls by keyboard (PageUp/PageDown, Ctrl+Home/Ctrl+End); ↑ from an empty
prompt focuses the newest message and ↑/↓ move between messages (↓ past the newest, or Esc,
returns to the prompt); c copies a focused message, a click copies a code block, Ctrl+T the
last reply, and Ctrl+C copies a mouse selection (quitting only when nothing is selected: the
app's binding, which copies through `copy_out`). Each copy's toast says whether the clipboard
surely took it (channel_tui/clipboard.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..clipboard import copy_text
from ..messages import CopyRequested, LeaveTranscript
from ..reasoning import copyable
from ..widgets.message_widgets import Remembered
from ..widgets.prompt import Prompt

if TYPE_CHECKING:
    from ..export import ChatMessage
    from ..widgets.message_widgets import AssistantMessage
    from ..widgets.transcript import Transcript


class ChatNavigation:
    transcript: Transcript
    prompt: Prompt
    messages: list[ChatMessage]
    current: AssistantMessage | None

    # -- scrolling and focus --------------------------------------------------------------------
    def action_scroll_transcript(self, where: str) -> None:
        scroll = {"page_up": self.transcript.scroll_page_up,
                  "page_down": self.transcript.scroll_page_down,
                  "home": self.transcript.scroll_home, "end": self.transcript.scroll_end}
        scroll[where](animate=False)

    # Handlers by name, not @on: the decorator registers only on a Textual class itself.
    def on_prompt_up_from_empty(self, event: Prompt.UpFromEmpty) -> None:
        self.transcript.focus_last()

    def on_leave_transcript(self, event: LeaveTranscript) -> None:
        self.prompt.focus()

    def message_focused(self) -> bool:
        return isinstance(self.focused, Remembered)

    # -- copying --------------------------------------------------------------------------------
    def on_copy_requested(self, event: CopyRequested) -> None:
        event.stop()
        self.copy_out(event.text, event.what)

    def copy_out(self, text: str, what: str) -> None:
        result = copy_text(self.app.copy_to_clipboard, text, what, self.data_dir())
        self.notify(result.message, title="Copy",
                    severity="information" if result.confirmed else "warning")

    def action_copy_reply(self) -> None:
        reply = next((m.content for m in reversed(self.messages)
                      if m.role == "assistant" and m.content), None)
        if self.current is not None and self.current.text:
            reply = self.current.text  # the reply still streaming
        if reply is None:
            self.notify("There is no reply to copy yet.", severity="warning")
            return
        self.copy_out(copyable(reply), "the last reply")  # a thinking model's answer only
