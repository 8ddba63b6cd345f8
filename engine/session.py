"""A named session: the stream log, the chat template, and a Conversation, kept in step.

The ring always holds the tokens of the template's rendering of the transcript so far
(`_rendered`), fed incrementally: each message's tokens are the difference between rendering
the history with it and without it. Assistant replies are fed as the exact ids that were
sampled (kept in the stream), so replaying a transcript rebuilds the same ring a live
conversation built.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .chat_template import ChatTemplateError
from .config import RingPolicy
from .conversation import Conversation, StopCheck
from .model import Model
from .sampler import SamplingSettings
from .stream import StreamEvent, StreamLog
from .tokenizer import Tokenizer

SESSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
END_MARKERS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "</s>")
REPLAY_SLICE = 1024  # tokens between replay progress reports

TextCallback = Callable[[str], None]
ReplayProgress = Callable[[int, int], None]  # (tokens done, tokens total)


def encode_with_content(tokenizer: Tokenizer, text: str, content: str) -> list[int]:
    """Encode template output `text`, treating the message `content` inside it as plain text.

    Control tokens in the template's own markup are parsed; the same strings typed by a person
    stay text, so a message cannot close its own turn or forge another role.
    """
    at = text.rfind(content) if content else -1
    if at < 0:
        return tokenizer.encode(text)
    return (
        tokenizer.encode(text[:at])
        + tokenizer.encode(content, parse_special=False)
        + tokenizer.encode(text[at + len(content) :])
    )


def check_session_name(name: str) -> str:
    if not SESSION_NAME.fullmatch(name):
        raise ValueError(
            f"invalid session name {name!r}: use 1-64 letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit"
        )
    return name


@dataclass
class BootReport:
    kind: str  # "cold" or "warm"
    reason: str
    restore_ms: float = 0.0
    replay_ms: float = 0.0
    replayed_events: int = 0
    replayed_tokens: int = 0
    phases_ms: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TurnResult:
    reply: str
    reply_ids: list[int]
    stop: str
    prompt_tokens: int
    prefill_s: float
    decode_s: float

    @property
    def prefill_tok_s(self) -> float:
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tok_s(self) -> float:
        return len(self.reply_ids) / self.decode_s if self.decode_s > 0 else 0.0


class Session:
    def __init__(self, model: Model, data_dir: Path, name: str,
                 policy: RingPolicy | None = None):
        self.model = model
        self.name = check_session_name(name)
        self.data_dir = Path(data_dir)
        self.stream = StreamLog(self.data_dir / f"{name}.stream.jsonl")
        self.conversation = Conversation(model, policy)
        self.messages: list[dict] = []
        self.last_event_id: str | None = None
        self._rendered = ""
        self._awaiting_reply = False  # the ring ends with the assistant generation prompt
        self.stop_ids = frozenset(
            i for i in [model.tokenizer.eos_id, *map(model.tokenizer.token_to_id, END_MARKERS)]
            if i is not None
        )

    @property
    def snapshot_path(self) -> Path:
        return self.data_dir / f"{self.name}.snapshot.bin"

    # -- boot -------------------------------------------------------------------------------
    def boot(self, progress: ReplayProgress | None = None) -> BootReport:
        """Cold boot: anchor the system prompt, then replay the whole stream."""
        t0 = time.perf_counter()
        read = self.stream.read()
        events = read.events
        if not events or events[0].role != "system":
            system = self.model.template.default_system_prompt()
            if system is not None and not events:
                events = [self.stream.append("system", system)]
        report = BootReport(kind="cold", reason="no snapshot", warnings=list(read.warnings))
        report.phases_ms["read_stream"] = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        report.replayed_tokens = self._replay(events, progress)
        report.replay_ms = (time.perf_counter() - t0) * 1e3
        report.replayed_events = len(events)
        report.phases_ms["replay"] = report.replay_ms
        return report

    def _replay(self, events: list[StreamEvent], progress: ReplayProgress | None) -> int:
        """Feed events to the ring in bulk: anchors first, then one batched prefill."""
        ring = self.conversation.ring
        tokens: list[int] = []
        turn_offsets: list[int] = []
        anchors: list[int] = []
        for i, event in enumerate(events):
            if i == 0 and event.role == "system":
                anchors = self._message_tokens(event, generation_prompt=False)
                if anchors:
                    self.conversation.ingest(anchors, anchors=True)
                continue
            if event.role == "user":
                turn_offsets.append(len(tokens))
            answered = i + 1 < len(events) and events[i + 1].role == "assistant"
            tokens += self._message_tokens(event, generation_prompt=answered)
        clock0 = ring.clock
        for offset in turn_offsets:
            ring.mark_turn_start(clock0 + offset)
        for start in range(0, len(tokens), REPLAY_SLICE):
            self.conversation.ingest(tokens[start : start + REPLAY_SLICE])
            if progress is not None:
                progress(min(start + REPLAY_SLICE, len(tokens)), len(tokens))
        if events:
            self.last_event_id = events[-1].id
        return len(anchors) + len(tokens)

    def _message_tokens(self, event: StreamEvent, generation_prompt: bool) -> list[int]:
        """Tokens that extend the ring by one stream event, updating the transcript."""
        ids = event.extra.get("tokens")
        exact = (
            event.role == "assistant"
            and self._awaiting_reply
            and event.extra.get("model") == self.model.fingerprint
            and isinstance(ids, list)
            and all(isinstance(t, int) and 0 <= t < self.model.config.vocab_size for t in ids)
        )
        if exact:
            return list(ids) + self._close_assistant(event.content)
        self.messages.append({"role": event.role, "content": event.content})
        return encode_with_content(
            self.model.tokenizer, self._advance(generation_prompt), event.content
        )

    # -- turns ------------------------------------------------------------------------------
    def turn(self, text: str, settings: SamplingSettings, max_tokens: int,
             on_text: TextCallback | None = None,
             should_stop: StopCheck | None = None) -> TurnResult:
        """Log the user's message (fsynced first), answer it, log the answer."""
        if not text.strip():
            raise ValueError("empty message")
        self.stream.append("user", text)
        self.messages.append({"role": "user", "content": text})
        t0 = time.perf_counter()
        self.conversation.ring.mark_turn_start()
        prompt = encode_with_content(
            self.model.tokenizer, self._advance(generation_prompt=True), text
        )
        self.conversation.ingest(prompt)
        prefill_s = time.perf_counter() - t0
        decoder = self.model.tokenizer.stream_decoder()

        def emit(token: int) -> None:
            piece = decoder.step(token)
            if piece and on_text is not None:
                on_text(piece)

        gen = self.conversation.generate(settings, max_tokens, self.stop_ids, emit, should_stop)
        reply = self.model.tokenizer.decode(gen.ids)
        self.conversation.ingest(self._close_assistant(reply))
        event = self.stream.append(
            "assistant", reply, tokens=gen.ids, model=self.model.fingerprint, stop=gen.stop,
            temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p,
        )
        self.last_event_id = event.id
        return TurnResult(reply, gen.ids, gen.stop, len(prompt), prefill_s, gen.decode_s)

    # -- template bookkeeping ---------------------------------------------------------------
    def _advance(self, generation_prompt: bool) -> str:
        """Render the transcript; return what it adds beyond what the ring already holds."""
        text = self._extend(self.messages, generation_prompt)
        delta = text[len(self._rendered) :]
        self._rendered = text
        self._awaiting_reply = generation_prompt
        return delta

    def _extend(self, messages: list[dict], generation_prompt: bool = False) -> str:
        text = self.model.template.render(messages, add_generation_prompt=generation_prompt)
        if messages and not text.startswith(self._rendered):
            raise ChatTemplateError(
                "chat template is not prefix-stable: rendering a longer transcript changed "
                "its beginning, so turns cannot be fed incrementally"
            )
        return text

    def _close_assistant(self, content: str) -> list[int]:
        """Tokens after an assistant reply's content, e.g. '<|im_end|>\\n' for ChatML."""
        self.messages.append({"role": "assistant", "content": content})
        text = self._extend(self.messages)
        body = text[len(self._rendered) :]
        self._rendered = text
        self._awaiting_reply = False
        if not body.startswith(content):
            raise ChatTemplateError("chat template rewrites assistant replies; cannot replay")
        return self.model.tokenizer.encode(body[len(content) :])
