"""A named session: its stream log, transcript, conversation state and snapshot, in step.

Boot is warm when `NAME.snapshot.bin` validates: the state is restored and only the stream
events after the snapshot's anchor are replayed. Otherwise it is cold: the system prompt is
prefilled as anchors and the whole stream replayed. A refused snapshot is set aside, never
deleted.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..backends.base import Backend
from ..model.config import RingPolicy
from ..model.model import Model
from ..snapshot.format import SnapshotCorruptError, SnapshotError
from ..snapshot.restore import restore
from ..snapshot.writer import SaveResult, Snapshotter
from ..state.conversation import Conversation, StopCheck
from ..state.sampler import SamplingSettings
from .stream import StreamEvent, StreamLog
from .transcript import Transcript

SESSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
END_MARKERS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "</s>")
REPLAY_SLICE = 256  # tokens between replay progress reports (and chances to abandon a boot)

TextCallback = Callable[[str], None]
ReplayProgress = Callable[[int, int], None]  # (tokens done, tokens total)


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
    restored_slots: int = 0
    snapshot_bytes: int = 0
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
    event_id: str  # the assistant event written to the stream

    @property
    def prefill_tok_s(self) -> float:
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tok_s(self) -> float:
        return len(self.reply_ids) / self.decode_s if self.decode_s > 0 else 0.0


class Session:
    def __init__(self, model: Model, data_dir: Path, name: str,
                 policy: RingPolicy | None = None, backend: Backend | None = None):
        self.model = model
        self.name = check_session_name(name)
        self.data_dir = Path(data_dir)
        self.stream = StreamLog(self.data_dir / f"{name}.stream.jsonl")
        self.conversation = Conversation(model, policy, backend=backend)
        self.transcript = Transcript(model.template, model.tokenizer, model.fingerprint,
                                     model.config.vocab_size)
        self.snapshots = Snapshotter(self.conversation, self.data_dir / f"{name}.snapshot.bin")
        self.last_event_id: str | None = None
        self.stream_offset = 0  # bytes of the stream that boot consumed
        self.stop_ids = frozenset(
            i for i in [model.tokenizer.eos_id, *map(model.tokenizer.token_to_id, END_MARKERS)]
            if i is not None
        )

    # -- boot and restore -------------------------------------------------------------------
    def boot(self, cold: bool = False, progress: ReplayProgress | None = None) -> BootReport:
        """Warm boot from the snapshot if it validates, else cold boot from the stream."""
        t0 = time.perf_counter()
        read = self.stream.read()
        self.stream_offset = read.end_offset
        events = read.events
        if not events:
            system = self.model.template.default_system_prompt()
            if system is not None:
                events = [self.stream.append("system", system)]
        read_ms = (time.perf_counter() - t0) * 1e3
        if cold:
            reason = "--cold: snapshot ignored"
        elif not self.snapshots.path.exists():
            reason = "no snapshot"
        else:
            try:
                report = self._warm(events, progress)
                report.phases_ms = {"read_stream": read_ms, **report.phases_ms}
                report.warnings = list(read.warnings)
                return report
            except SnapshotError as exc:
                reason = f"snapshot refused: {exc}; kept as {self._set_aside().name}"
        report = BootReport(kind="cold", reason=reason, warnings=list(read.warnings))
        t0 = time.perf_counter()
        report.replayed_tokens = self._replay(events, progress, first_is_system=True)
        report.replay_ms = (time.perf_counter() - t0) * 1e3
        report.replayed_events = len(events)
        report.phases_ms = {"read_stream": read_ms, "replay": report.replay_ms}
        return report

    def restore_now(self, progress: ReplayProgress | None = None) -> BootReport:
        """Reload the last snapshot (waiting for any save in flight), then replay past it."""
        self.snapshots.wait()
        return self._warm(self.stream.read().events, progress)

    def _warm(self, events: list[StreamEvent], progress: ReplayProgress | None) -> BootReport:
        index = {e.id: i for i, e in enumerate(events)}
        report = restore(self.conversation, self.snapshots.path, known_ids=index.keys())
        self.snapshots.last_clock = report.clock
        anchor = index[report.stream_id]
        self.transcript.reset_to(events[: anchor + 1],
                                 bool(report.session.get("awaiting_reply", False)))
        self.last_event_id = report.stream_id
        later = events[anchor + 1 :]
        t0 = time.perf_counter()
        replayed = self._replay(later, progress, first_is_system=False)
        replay_ms = (time.perf_counter() - t0) * 1e3
        return BootReport(
            kind="warm", reason="snapshot valid", restore_ms=report.restore_ms,
            replay_ms=replay_ms, replayed_events=len(later), replayed_tokens=replayed,
            restored_slots=report.n_active, snapshot_bytes=report.bytes,
            phases_ms={"validate": report.validate_ms, "copy": report.copy_ms,
                       "replay": replay_ms},
        )

    def _set_aside(self) -> Path:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        aside = self.snapshots.path.with_name(f"{self.snapshots.path.name}.rejected-{stamp}")
        self.snapshots.path.rename(aside)
        return aside

    def _replay(self, events: list[StreamEvent], progress: ReplayProgress | None,
                first_is_system: bool) -> int:
        """Feed events to the ring in bulk: anchors first, then one batched prefill."""
        ring = self.conversation.ring
        tokens: list[int] = []
        turn_offsets: list[int] = []
        anchors: list[int] = []
        for i, event in enumerate(events):
            if i == 0 and first_is_system and event.role == "system":
                anchors = self.transcript.event_tokens(event, generation_prompt=False)
                if anchors:
                    self.conversation.ingest(anchors, anchors=True)
                continue
            if event.role == "user":
                turn_offsets.append(len(tokens))
            answered = i + 1 < len(events) and events[i + 1].role == "assistant"
            tokens += self.transcript.event_tokens(event, generation_prompt=answered)
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

    # -- turns and saves ------------------------------------------------------------------
    def turn(self, text: str, settings: SamplingSettings, max_tokens: int,
             on_text: TextCallback | None = None,
             should_stop: StopCheck | None = None) -> TurnResult:
        """Log the user's message (fsynced first), answer it, log the answer."""
        if not text.strip():
            raise ValueError("empty message")
        self.last_event_id = self.stream.append("user", text).id
        self.conversation.ring.mark_turn_start()
        return self._respond(self.transcript.user_turn(text), settings, max_tokens, on_text,
                             should_stop)

    def respond_to(self, event: StreamEvent, settings: SamplingSettings, max_tokens: int,
                   on_text: TextCallback | None = None,
                   should_stop: StopCheck | None = None) -> TurnResult:
        """Answer a user event another program appended to the stream, as if typed here."""
        self.last_event_id = event.id
        self.conversation.ring.mark_turn_start()
        prompt = self.transcript.event_tokens(event, generation_prompt=True)
        return self._respond(prompt, settings, max_tokens, on_text, should_stop)

    def answer_pending(self, settings: SamplingSettings, max_tokens: int,
                       on_text: TextCallback | None = None,
                       should_stop: StopCheck | None = None) -> TurnResult | None:
        """Answer the last user message if the transcript ends unanswered (say, after a
        crash mid-turn, or a message sent while no engine ran); None if there is none."""
        if not self.transcript.pending_user():
            return None
        self.conversation.ring.mark_turn_start()
        prompt = self.transcript.generation_prompt()
        return self._respond(prompt, settings, max_tokens, on_text, should_stop)

    def ingest_event(self, event: StreamEvent) -> int:
        """Feed a non-user event another program appended (no reply); tokens fed."""
        tokens = self.transcript.event_tokens(event, generation_prompt=False)
        if tokens:
            self.conversation.ingest(tokens)
        self.last_event_id = event.id
        return len(tokens)

    def _respond(self, prompt: list[int], settings: SamplingSettings, max_tokens: int,
                 on_text: TextCallback | None, should_stop: StopCheck | None) -> TurnResult:
        # The prompt is ingested whole even if a stop is requested meanwhile: a prompt cut
        # short would leave the ring out of step with the transcript. Decoding then stops
        # before the first token, and the turn closes as 'cancelled'.
        t0 = time.perf_counter()
        self.conversation.ingest(prompt)
        prefill_s = time.perf_counter() - t0
        decoder = self.model.tokenizer.stream_decoder()

        def emit(token: int) -> None:
            piece = decoder.step(token)
            if piece and on_text is not None:
                on_text(piece)

        gen = self.conversation.generate(settings, max_tokens, self.stop_ids, emit, should_stop)
        reply = self.model.tokenizer.decode(gen.ids)
        self.conversation.ingest(self.transcript.close_assistant(reply))
        event = self.stream.append(
            "assistant", reply, tokens=gen.ids, model=self.model.fingerprint, stop=gen.stop,
            temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p,
        )
        self.last_event_id = event.id
        return TurnResult(reply, gen.ids, gen.stop, len(prompt), prefill_s, gen.decode_s,
                          event.id)

    def save(self, wait: bool = True,
             on_done: Callable[[SaveResult], None] | None = None) -> SaveResult:
        """Checkpoint the working state, anchored at the last stream event it includes."""
        if self.last_event_id is None:
            raise SnapshotCorruptError("nothing to save: the session has no stream events")
        info = {"awaiting_reply": self.transcript.awaiting_reply, "session": self.name}
        return self.snapshots.save(self.last_event_id, info, wait=wait, on_done=on_done)
