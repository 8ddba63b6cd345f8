"""The conversation: user messages, streamed Markdown replies and notes, pinned to the bottom.

Messages take focus (↑ from an empty prompt, then ↑/↓ between them), and a focused one is
copied with c; the chat screen does the copying (CopyRequested). A thinking model's reply
shows its reasoning folded (widgets/reasoning_fold.py); Enter on the reply opens it."""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Markdown, Static
from textual.widgets.markdown import MarkdownStream

from .. import format as fmt
from ..export import ChatMessage
from ..messages import CopyRequested, LeaveTranscript
from ..reasoning import Reasoned, copyable, split_reasoning, undecided
from .reasoning_fold import ReasoningFold
from .reply_markdown import ReplyMarkdown

MAX_SHOWN = 200  # messages drawn when a transcript is rebuilt; mounting thousands is slow
STOP_NOTES = {
    "cancelled": "⊘ cancelled",
    "max_tokens": "… cut at the token limit",
    "repetition": "… stopped: it was repeating itself",
    "interrupted": "⚠ interrupted: the engine exited",
    "failed": "⚠ failed",
}
UNANSWERED = ("cancelled", "interrupted", "failed")  # such a turn was taken out of the ring
# A message stopped while the model was reading it: the engine took it back out of the ring
# (a withdrawal, docs/protocol.md), so it is shown as withdrawn, with no reply bubble.
WITHDRAWN = "withdrawn"
WITHDRAWN_TITLE = "you · withdrawn: stopped while the model was reading it"
# How much of a turn the ring still holds (the engine's `ring.turns`), as the message titles say.
MEMORY_NOTES = {"whole": "", "partly": "partly forgotten", "forgotten": "forgotten"}


# A focused message's keys. On each message class itself: Textual merges the BINDINGS of
# DOMNode classes only, not of a mixin such as Remembered.
MESSAGE_BINDINGS = [
    Binding("c,y", "copy", "Copy", tooltip="A focused message: copy it"),
    Binding("up", "neighbour(-1)", "Earlier", show=False),
    Binding("down", "neighbour(1)", "Later", show=False),
]


class Remembered:
    """A message that says, in its border title and a CSS class, whether the model can still
    see it: 'partly forgotten' once the ring evicted some of its turn, 'forgotten' once all.
    It takes focus, to be copied (c) or to move on to its neighbours (↑/↓)."""

    can_focus = True
    title: str
    text: str
    what: str  # in the copy toast
    memory = "whole"

    def copied(self) -> str:
        """What c copies."""
        return self.text

    def action_copy(self) -> None:
        self.post_message(CopyRequested(self.copied(), self.what))

    def action_neighbour(self, delta: int) -> None:
        transcript = self.parent
        if isinstance(transcript, Transcript):
            transcript.focus_neighbour(self, delta)

    def set_memory(self, state: str) -> None:
        if state == self.memory:
            return
        self.remove_class(f"memory-{self.memory}")
        self.memory = state
        self.add_class(f"memory-{state}")
        note = MEMORY_NOTES[state]
        self.border_title = self.title + (f" · {note}" if note else "")


class UserMessage(Remembered, Static):
    BINDINGS = MESSAGE_BINDINGS
    what = "your message"

    def __init__(self, text: str, via: str | None = None) -> None:
        super().__init__(text, markup=False, classes="message user")
        self.text = text
        self.title = "you" + (f" · {via}" if via else "")
        self.border_title = self.title

    def mark_withdrawn(self) -> None:
        self.title = self.border_title = WITHDRAWN_TITLE
        self.add_class("withdrawn")


class SystemMessage(Static):
    """The system prompt (the ring's pinned anchors), shown folded to one line."""

    def __init__(self, text: str) -> None:
        first = " ".join(text.split())
        super().__init__(f"System prompt · {first[:200]}", markup=False,
                         classes="message system")


class Note(Static):
    """Something the app tells the user inside the conversation (restarts, errors)."""

    def __init__(self, text: str, kind: str = "info") -> None:
        super().__init__(text, markup=False, classes=f"note {kind}")


class AssistantMessage(Remembered, Vertical):
    """A reply; while it streams, tokens go through Textual's MarkdownStream. A thinking
    model's reasoning is folded above the answer, and only the answer is Markdown; `text`
    stays the whole reply, as the engine wrote it."""

    # No tooltip on Enter: the help table lists the keys every message has (and the fold
    # says how to open it).
    BINDINGS = [*MESSAGE_BINDINGS,
                Binding("enter", "toggle_reasoning", "Reasoning", show=False)]
    what = "the reply"

    def __init__(self, text: str = "", stop: str | None = None, detail: str = "") -> None:
        super().__init__(classes="message assistant")
        self.title = self.border_title = "assistant"
        self.text = text
        self.stop = stop
        self.detail = detail  # the speed figures under a finished reply
        self._stream: MarkdownStream | None = None
        self._read_start: tuple[float, int] | None = None  # (time, tokens) of 1st report
        self._written = ""  # the answer as drawn so far: the stream gets only what is new

    def compose(self) -> ComposeResult:
        parts = split_reasoning(self.text)
        if _has_fold(parts, streaming=False):
            yield ReasoningFold(parts)
        self._written = parts.answer
        yield ReplyMarkdown(parts.answer, classes="body")
        yield Static("", classes="stop-note")

    def copied(self) -> str:
        return copyable(self.text)  # the answer, without the reasoning

    def action_toggle_reasoning(self) -> None:
        for fold in self.query(ReasoningFold):
            fold.toggle_open()

    def on_mount(self) -> None:
        self._show_stop(self.detail)

    def show_reading(self, done: int, total: int) -> None:
        """While the model reads a long message: tokens read of total, the rate since the
        first report, and the time left, where the reply will appear."""
        now = time.monotonic()
        if self._read_start is None or done < self._read_start[1]:
            self._read_start = (now, done)
        start_t, start_done = self._read_start
        rate = (done - start_done) / (now - start_t) if now > start_t else None
        label = self.query_one(".stop-note", Static)
        label.update(f"Reading your message · {fmt.replay_line(done, total, rate)} · "
                     "Esc stops it")
        label.display = True
        self.add_class("reading")

    async def append(self, piece: str) -> None:
        if self.has_class("reading"):  # the message is read: the reply takes the space
            self.remove_class("reading")
            self._show_stop()
        self.add_class("streaming")
        self.text += piece
        if undecided(self.text):  # blank so far, or '<th': wait to know what it is
            return
        parts = split_reasoning(self.text)
        await self._show_fold(parts, streaming=True)
        if parts.answer.startswith(self._written):
            new = parts.answer[len(self._written):]
            self._written = parts.answer
            if new:
                # Made at the first answer text, not the first piece: a stream that never
                # got a write does not stop (a reply of blanks, or of reasoning alone).
                if self._stream is None:
                    self._stream = Markdown.get_stream(self.query_one(Markdown))
                await self._stream.write(new)

    async def finish(self, stop: str, detail: str = "", text: str | None = None) -> None:
        """The reply ended; `text` is the whole reply as the engine logged it, which wins
        over the streamed pieces where they differ (bytes that are not UTF-8 decode
        differently piece by piece than whole)."""
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        if text is not None:
            self.text = text
        parts = split_reasoning(self.text)
        await self._show_fold(parts, streaming=False)
        if parts.answer != self._written:
            self._written = parts.answer
            await self.query_one(Markdown).update(parts.answer)
        self.remove_class("streaming", "reading")
        self.stop = stop
        self.detail = detail
        self._show_stop(detail)

    async def _show_fold(self, parts: Reasoned, streaming: bool) -> None:
        """The folded reasoning: mounted once the reply turns out to have some, kept up to
        date as it streams, taken away if it closed empty."""
        fold = next(iter(self.query(ReasoningFold)), None)
        if not _has_fold(parts, streaming):
            if fold is not None:
                await fold.remove()
        elif fold is None:
            await self.mount(ReasoningFold(parts, streaming), before=self.query_one(Markdown))
        else:
            fold.set_parts(parts, streaming)

    def _show_stop(self, detail: str = "") -> None:
        note = STOP_NOTES.get(self.stop or "", "")
        text = " · ".join(part for part in (note, detail) if part)
        label = self.query_one(".stop-note", Static)
        label.update(text)
        label.display = bool(text)
        self.set_class(self.stop in UNANSWERED, "cancelled")


def _has_fold(parts: Reasoned, streaming: bool) -> bool:
    """A fold is shown for reasoning with words in it, or while the model is still at it; an
    empty <think></think> (a thinking model told not to think) shows none."""
    if parts.reasoning is None:
        return False
    return bool(parts.reasoning) or (parts.still_thinking and streaming)


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
