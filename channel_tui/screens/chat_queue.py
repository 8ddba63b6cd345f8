"""One message typed while a reply streams or the session still opens (a mixin of
ChatScreen): kept, shown as pending, and sent when the engine can take it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .chat_rewind import REWINDING

if TYPE_CHECKING:
    from ..widgets.message_widgets import UserMessage
    from ..widgets.prompt import Prompt
    from ..widgets.transcript import Transcript


class ChatQueue:
    queued: str | None
    queued_widget: UserMessage | None
    transcript: Transcript
    prompt: Prompt

    async def _queue(self, text: str) -> None:
        """Keep one message until the engine can take it, shown in the transcript as
        pending; it is sent when the session has booted or the reply has ended."""
        self.queued = text
        when = ("the reply ends · Esc stops it" if self.busy else "the engine is ready"
                if not self.session_open else "the rewind is done")
        self.queued_widget = await self.transcript.add_user(text, via="pending")
        self.note(f"Queued: {_short(text)} · sends when {when}")

    async def _drop_queued(self) -> None:
        self.queued = None
        if self.queued_widget is not None:
            await self.queued_widget.remove()
            self.queued_widget = None

    async def send_queued(self) -> None:
        if self.queued is not None and not self.busy and not self.fatal and \
                self.session_open and self.rewind_in_flight() != REWINDING:
            text = self.queued
            await self._drop_queued()
            if not await self.send_turn(text):
                await self._queue(text)

    def _restore_draft(self, text: str) -> None:
        if not self.prompt.text.strip():
            self.prompt.load_text(text)


def _short(text: str, limit: int = 40) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 1] + "…"
