"""The conversation: the message widgets (widgets/message_widgets.py), pinned to the bottom
while replies stream."""

from __future__ import annotations

from textual.containers import VerticalScroll

from ..export import ChatMessage
from ..messages import LeaveTranscript
from .message_widgets import (
    UNANSWERED,
    WITHDRAWN,
    AssistantMessage,
    Note,
    Remembered,
    SystemMessage,
    UserMessage,
)

MAX_SHOWN = 200  # messages drawn when a transcript is rebuilt; mounting thousands is slow


class Transcript(VerticalScroll):
    """Holds the message widgets. `anchor()` keeps it pinned to the bottom while replies
    stream, until the user scrolls up; scrolling back down pins it again."""

    can_focus = False  # the prompt keeps focus; the mouse wheel still scrolls

    def on_mount(self) -> None:
        self.anchor()

    def _messages(self) -> list[Remembered]:
        return [w for w in self.children if isinstance(w, (UserMessage, AssistantMessage))]

    def focus_last(self) -> bool:
        """Focus the newest message (↑ from an empty prompt); False when there is none."""
        messages = self._messages()
        if messages:
            messages[-1].focus()
        return bool(messages)

    def focus_neighbour(self, message: Remembered, delta: int) -> None:
        messages = self._messages()
        at = messages.index(message) + delta if message in messages else len(messages)
        if at >= len(messages):
            self.post_message(LeaveTranscript())
        elif at >= 0:
            messages[at].focus()
            self.scroll_to_widget(messages[at], animate=False)

    async def show(self, messages: list[ChatMessage]) -> None:
        """Rebuild from a transcript (open, restore, restart); long ones show their tail."""
        await self.remove_children()
        hidden = max(0, len(messages) - MAX_SHOWN)
        widgets = []
        for message in messages[hidden:]:
            if message.stop == WITHDRAWN:  # no bubble: the message above it is marked
                user = next((w for w in reversed(widgets) if isinstance(w, UserMessage)), None)
                if user is not None:
                    user.mark_withdrawn()
                continue
            widgets.append(self._widget_for(message))
        if hidden:
            widgets.insert(0, Note(f"… {hidden:,} earlier messages not shown "
                                   "(Ctrl+E exports the whole transcript)"))
        if widgets:
            await self.mount_all(widgets)
        self.anchor()

    async def drop_last(self, count: int) -> None:
        """Remove the last `count` message bubbles (an undo, a regenerate), nothing else."""
        bubbles = [w for w in self.children if isinstance(w, (UserMessage, AssistantMessage))]
        for widget in bubbles[max(0, len(bubbles) - count):]:
            await widget.remove()

    def show_memory(self, turns: list[list[int]], older_forgotten: bool) -> None:
        """Mark each answered turn (a user message and its replies) by how much of it the ring
        still holds. `turns` is the engine's `[tokens, kept]` per recorded turn, oldest first;
        they are the newest answered turns shown, since a cancelled or failed turn was taken
        back out of the ring and a message still waiting for its reply is not in it yet."""
        answered: list[list[Remembered]] = []
        for widget in self.children:
            if isinstance(widget, UserMessage):
                answered.append([widget])
            elif isinstance(widget, AssistantMessage) and answered:
                answered[-1].append(widget)
        answered = [turn for turn in answered if len(turn) > 1
                    and all(m.stop not in UNANSWERED for m in turn[1:])]
        for age, turn in enumerate(reversed(answered)):
            if age < len(turns):
                tokens, kept = turns[-1 - age]
                state = "whole" if kept >= tokens else "partly" if kept else "forgotten"
            else:
                state = "forgotten" if older_forgotten else "whole"
            for message in turn:
                message.set_memory(state)

    def _widget_for(self, message: ChatMessage):
        if message.role == "user":
            return UserMessage(message.content)
        if message.role == "assistant":
            return AssistantMessage(message.content, message.stop, message.stats)
        return SystemMessage(message.content)

    async def add_user(self, text: str, via: str | None = None) -> UserMessage:
        widget = UserMessage(text, via)
        await self.mount(widget)
        return widget

    async def add_assistant(self) -> AssistantMessage:
        widget = AssistantMessage()
        await self.mount(widget)
        return widget

    async def withdraw(self, reply: AssistantMessage | None) -> None:
        """The message being read was stopped and taken back out: drop its reply bubble and
        mark the message withdrawn."""
        if reply is not None:
            await reply.remove()
        user = next((w for w in reversed(self.children) if isinstance(w, UserMessage)), None)
        if user is not None:
            user.mark_withdrawn()

    async def add_note(self, text: str, kind: str = "info") -> Note:
        widget = Note(text, kind)
        await self.mount(widget)
        return widget
