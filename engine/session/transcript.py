"""The transcript as the chat template renders it, kept in step with the ring's tokens.

The ring always holds the tokens of the template's rendering of the messages so far
(`rendered`), fed incrementally: each message's tokens are the difference between rendering
the history with it and without it. Assistant replies are fed as the exact ids that were
sampled (kept in the stream), so replaying a transcript rebuilds the ring a live conversation
built.

Rendering the whole history for every message would make a replay O(n²) in the number of
messages. Most templates (ChatML among them) render each message on its own, depending only
on the first message (the system prompt, or its absence) and on where it falls (first, odd or
even): for those, the difference a new message makes is the same within a short window, the
first message plus the last few with the new one at the same parity. A transcript checks that
on its first few windowed renders against the full rendering, and only then trusts the
window; any mismatch, and it renders in full from then on.

Thinking templates (Qwen3, Qwen3.5) open the reply inside a reasoning block (`<think>\n` in
the generation prompt) and render a past reply otherwise: its reasoning reformatted while it
is the newest reply, dropped once a later question follows. The ring keeps what was generated,
reasoning included. After such a reply the transcript follows the template's rendering of the
history, and a later message's tokens are what the template writes after the reply's closing
(e.g. `<|im_end|>\n`): everything from the reply's end on (close_assistant, _extension). The
window serves these templates too, checked the same way: what a message adds depends on the
last question, which the window holds. A transcript restored from a snapshot (reset_to)
finds the reply's closing again by rendering a stand-in reply.
"""

from __future__ import annotations

from ..model.chat_template import ChatTemplate, ChatTemplateError
from ..model.tokenizer import Tokenizer
from .stream import StreamEvent

TranscriptMark = tuple[int, str, bool]  # messages kept, rendered text, awaiting a reply
_SENTINEL_REPLY = "QZXREPLYSENTINELQZX"  # stands for a reply, to find what follows one
THINK_OPENING = "<think>"  # a template that writes it is a thinking template (Qwen3, Qwen3.5)
WINDOW_FROM = 6  # messages before rendering through a window pays off
WINDOW_CHECKS = 3  # windowed renders compared with full ones before the window is trusted


def encode_with_content(tokenizer: Tokenizer, text: str, content: str) -> list[int]:
    """Encode template output `text`, treating the message `content` inside it as plain text.

    Control tokens in the template's own markup are parsed; the same strings typed by a person
    stay text, so a message cannot close its own turn or forge another role.
    """
    at = text.rfind(content) if content else -1
    if at < 0 or tokenizer.encode(content) == tokenizer.encode(content, parse_special=False):
        # Nothing in the message reads as a control token, so the whole text encodes as
        # llama.cpp would encode it; splitting would also add a SentencePiece space marker at
        # each cut and change BPE merges across it.
        return tokenizer.encode(text)
    return (
        tokenizer.encode(text[:at])
        + tokenizer.encode(content, parse_special=False)
        + tokenizer.encode(text[at + len(content) :])
    )


class Transcript:
    def __init__(self, template: ChatTemplate, tokenizer: Tokenizer, fingerprint: str,
                 vocab_size: int):
        self.template = template
        self.tokenizer = tokenizer
        self.fingerprint = fingerprint
        self.vocab_size = vocab_size
        self.messages: list[dict] = []
        self.rendered = ""
        self.awaiting_reply = False  # the ring ends with the assistant generation prompt
        self.window_ok: bool | None = None  # None: not known yet (see the module's doc)
        self._window_checks = 0
        # What the template writes after a reply, once a reply was closed on the template's
        # rendering of the history (a thinking template's): later messages start after it.
        self._reply_closing: str | None = None

    def clear(self) -> None:
        """Forget every message, as a new transcript (a cold rebuild starts from here)."""
        self.messages, self.rendered, self.awaiting_reply = [], "", False

    def mark(self) -> TranscriptMark:
        """A point to rewind to if what follows fails."""
        return len(self.messages), self.rendered, self.awaiting_reply

    def rewind(self, mark: TranscriptMark) -> None:
        count, self.rendered, self.awaiting_reply = mark
        del self.messages[count:]

    def reset_to(self, events: list[StreamEvent], awaiting_reply: bool) -> None:
        """Adopt `events` as already in the ring (a restored snapshot holds their tokens)."""
        self.messages = [{"role": e.role, "content": e.content} for e in events]
        self.rendered = self.template.render(self.messages, add_generation_prompt=awaiting_reply)
        self.awaiting_reply = awaiting_reply
        self._reply_closing = self._thinking_closing()

    def _thinking_closing(self) -> str | None:
        """What a thinking template writes after a reply, if the transcript holds one (None
        for other templates): close_assistant learns it from each reply it closes, and a
        transcript restored from a snapshot (reset_to) must know it too, or the next
        question, which re-renders the last reply without its reasoning, would read as a
        template that is not prefix-stable."""
        last = next((i for i in range(len(self.messages) - 1, -1, -1)
                     if self.messages[i]["role"] == "assistant"), None)
        if last is None:
            return None
        head = self.messages[:last]
        try:
            plain = self.template.render(head, add_generation_prompt=False)
            opened = self.template.render(head, add_generation_prompt=True)
            if not opened.startswith(plain) or THINK_OPENING not in opened[len(plain) :]:
                return None
            return self._closing_after(head)
        except ChatTemplateError:  # a history it will not render alone (a reply first)
            return None

    def _closing_after(self, head: list[dict]) -> str | None:
        """What the template writes after a reply that follows `head`, found by rendering a
        stand-in reply (one it keeps as it is); None if the stand-in does not survive."""
        probe = self.template.render(head + [{"role": "assistant", "content": _SENTINEL_REPLY}],
                                     add_generation_prompt=False)
        at = probe.find(_SENTINEL_REPLY)
        return probe[at + len(_SENTINEL_REPLY) :] if at >= 0 else None

    def user_turn(self, text: str) -> list[int]:
        """Tokens for a new user message plus the assistant generation prompt. If the
        template fails, the transcript is left as it was."""
        mark = self.mark()
        self.messages.append({"role": "user", "content": text})
        try:
            return self._encode_new(self._advance(True), text, at_start=not mark[1])
        except BaseException:
            self.rewind(mark)
            raise

    def event_tokens(self, event: StreamEvent, generation_prompt: bool) -> list[int]:
        """Tokens that extend the ring by one stream event."""
        ids = event.extra.get("tokens")
        exact = (
            event.role == "assistant"
            and self.awaiting_reply
            and event.extra.get("model") == self.fingerprint
            and isinstance(ids, list)
            and all(isinstance(t, int) and 0 <= t < self.vocab_size for t in ids)
        )
        mark = self.mark()
        try:
            if exact:
                return list(ids) + self.close_assistant(event.content)
            self.messages.append({"role": event.role, "content": event.content})
            return self._encode_new(self._advance(generation_prompt), event.content,
                                    at_start=not mark[1])
        except BaseException:
            self.rewind(mark)
            raise

    def pending_user(self) -> bool:
        """The transcript ends with a user message that nothing has answered yet."""
        return bool(self.messages) and self.messages[-1]["role"] == "user" and (
            not self.awaiting_reply
        )

    def generation_prompt(self) -> list[int]:
        """Tokens that open the assistant's reply after a pending user message."""
        return self.tokenizer.encode(self._advance(True, appended=False))

    def close_assistant(self, content: str) -> list[int]:
        """Record a reply whose tokens are in the ring; return what the template puts after
        its content (e.g. '<|im_end|>\\n' for ChatML)."""
        opened, awaiting = self.rendered, self.awaiting_reply
        self.messages.append({"role": "assistant", "content": content})
        failure: ChatTemplateError | None = None
        try:
            body = self._extension(False)
        except ChatTemplateError as exc:  # a thinking template may still close it below
            body, failure = None, exc
        # A template that trims replies (Gemma's `content | trim`) renders them without the
        # whitespace the ring holds; what it puts after them is still what follows.
        kept = next((c for c in (content, content.strip()) if body and body.startswith(c)), None)
        thinking = awaiting and THINK_OPENING in opened
        if kept is not None:
            self.rendered += body
            self.awaiting_reply = False
            if thinking:  # a later question may still re-render this reply (its reasoning)
                self._reply_closing = body[len(kept) :]
            return self.tokenizer.encode(body[len(kept) :])
        if thinking:  # the history renders the reply its own way (its reasoning)
            return self._close_reasoned(opened)
        if failure is not None:  # the template's own words (it raised, or lost its prefix)
            raise failure
        raise ChatTemplateError("chat template rewrites assistant replies; cannot replay")

    def _close_reasoned(self, opened: str) -> list[int]:
        """close_assistant where the generation prompt opened the reply with something the
        history renders otherwise (a thinking template's `<think>\n`): the tokens the template
        puts after a reply, found by rendering one that it keeps as it is; the transcript
        goes on from the history's rendering, as long as that keeps what came before the
        reply's turn. Through the window once it is trusted (the first message and the last
        few): the three renders of the whole history made a long chat's every turn O(n)."""
        windowed = bool(self.window_ok) and len(self.messages) >= WINDOW_FROM
        messages = self._window() if windowed else self.messages
        history = self.template.render(messages, add_generation_prompt=False)
        before = self.template.render(messages[:-1], add_generation_prompt=False)
        closing = self._closing_after(messages[:-1])
        if not (history.startswith(before) and (windowed or opened.startswith(before))
                and closing is not None):
            raise ChatTemplateError(
                "chat template is not prefix-stable: rendering a longer transcript changed "
                "its beginning, so turns cannot be fed incrementally")
        self._reply_closing = closing
        # Windowed, what was fed (the reply as generated): the next full render, if the
        # window ever fails, cuts the text after this closing as it does after any reply.
        self.rendered = (opened + self.messages[-1]["content"] + self._reply_closing
                         if windowed else history)
        self.awaiting_reply = False
        return self.tokenizer.encode(self._reply_closing)

    def _encode_new(self, text: str, content: str, at_start: bool) -> list[int]:
        """Tokens for rendered `text` holding a message's `content`. The ring's first tokens
        start with BOS when the model wants one and the template did not write it, as
        llama.cpp tokenizes a prompt (templates that write `bos_token` get no second one)."""
        ids = encode_with_content(self.tokenizer, text, content)
        bos = self.tokenizer.bos_id
        if at_start and self.tokenizer.add_bos and bos is not None and ids[:1] != [bos]:
            ids.insert(0, bos)
        return ids

    def _advance(self, generation_prompt: bool, appended: bool = True) -> str:
        delta = self._extension(generation_prompt, appended)
        self.rendered += delta
        self.awaiting_reply = generation_prompt
        return delta

    def _extension(self, generation_prompt: bool, appended: bool = True) -> str:
        """What rendering the messages adds to `rendered`: the newest message's part when it
        was just `appended`, else only what the generation prompt changes."""
        windowed = None
        if self.window_ok is not False and len(self.messages) >= WINDOW_FROM:
            windowed = self._windowed_extension(generation_prompt, appended)
            if windowed is not None and self.window_ok:
                return windowed
        text = self.template.render(self.messages, add_generation_prompt=generation_prompt)
        if not text.startswith(self.rendered) and appended:
            # A thinking template re-rendered a past reply (its reasoning dropped): the new
            # message starts after the last reply's closing before it.
            at = self._after_last_reply(text)
            if at is not None:
                self.rendered = text[:at]
        if not text.startswith(self.rendered):
            raise ChatTemplateError(
                "chat template is not prefix-stable: rendering a longer transcript changed "
                "its beginning, so turns cannot be fed incrementally"
            )
        full = text[len(self.rendered) :]
        if windowed is not None or len(self.messages) >= WINDOW_FROM:
            if windowed != full:
                self.window_ok = False
            else:
                self._window_checks += 1
                self.window_ok = True if self._window_checks >= WINDOW_CHECKS else None
        return full

    def _windowed_extension(self, generation_prompt: bool, appended: bool) -> str | None:
        """The extension rendered through a window: the first message, then the last few
        from an odd index on, so the newest keeps its parity. None if the window's renders
        do not extend each other (nor, after a thinking template's reply, continue after
        its closing). Only an `appended` message is new: a generation prompt after a
        message already rendered (a pending one) must not render it again."""
        window = self._window()
        rendered = window[:-1] if appended else window
        before = self.template.render(rendered, add_generation_prompt=self.awaiting_reply)
        after = self.template.render(window, add_generation_prompt=generation_prompt)
        if after.startswith(before):
            return after[len(before) :]
        at = self._after_last_reply(after) if appended else None
        return None if at is None else after[at:]

    def _window(self) -> list[dict]:
        """The first message and the last few, from an odd index on."""
        start = len(self.messages) - 4
        start -= 1 - start % 2  # odd: (newest - start + 1) has the newest's parity
        return self.messages[:1] + self.messages[start:]

    def _after_last_reply(self, text: str) -> int | None:
        """Where the newest message's part of `text` (a rendering ending with it) starts
        after a thinking template's reply: past the last reply's closing before it; None if
        no such reply was closed."""
        if not self._reply_closing:
            return None
        newest = self.messages[-1]["content"]
        before = text.rfind(newest) if newest else len(text)
        cut = text.rfind(self._reply_closing, 0, before)
        return None if cut < 0 else cut + len(self._reply_closing)
