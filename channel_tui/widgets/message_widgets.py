"""The transcript's message widgets: user messages, streamed Markdown replies, system prompts
and notes (widgets/transcript.py holds them, pinned to the bottom).

Messages take focus (↑ from an empty prompt, then ↑/↓ between them), and a focused one is
copied with c; the chat screen does the copying (CopyRequested). A thinking model's reply
shows its reasoning folded (widgets/reasoning_fold.py); Enter on the reply opens it."""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Markdown, Static
from textual.widgets.markdown import MarkdownStream

from .. import format as fmt
from ..messages import CopyRequested
from ..reasoning import Reasoned, copyable, split_reasoning, undecided
from .reasoning_fold import ReasoningFold
from .reply_markdown import ReplyMarkdown

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
        # The container (widgets/transcript.py, which imports this module) moves the focus.
        focus_neighbour = getattr(self.parent, "focus_neighbour", None)
        if focus_neighbour is not None:
            focus_neighbour(self, delta)

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
