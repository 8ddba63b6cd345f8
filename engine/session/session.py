"""A named session: its stream log, transcript, conversation state and snapshot, in step.

A session has one writer: `open` takes its lock (owner.py) before booting it, and `close`
gives the lock back; a second opener is refused. `boot` alone takes no lock, for programs
that only read a session (the boot comparison, benchmarks, tests).

Boot is warm when `NAME.snapshot.bin` validates and the stream agrees with it, else cold,
with the reason (boot.py).

A turn logs its message only once everything about it has been checked and its prompt
rendered. A turn that cannot finish after that (cancelled mid-prefill, or failed) withdraws
its message and rebuilds the state without it, so the ring never holds half a message.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ulid import ULID

from ..backends.base import Backend
from ..conversation import Conversation, StopCheck
from ..errors import ModelFileChangedError, StreamError
from ..model.model import Model
from ..paths import SessionFiles, check_session_name
from ..snapshot.writer import SaveResult, SnapshotStatus, Snapshotter
from ..state.ring_policy import RingPolicy
from ..state.sampler import SamplingSettings
from . import boot as booting
from .boot import BootReport, StreamOrderError
from .owner import SessionLock, acquire_session
from .replay import IN_REPLY_TO, WITHDRAWS, ReplayProgress, taken_in, withdrawn_ids
from .stream import StreamEvent, StreamLog, StreamRead
from .transcript import Transcript
from .turns import MAX_TOKENS, LastTurn, PendingTurn, TurnPoint, asked_max_tokens

log = logging.getLogger("channel.engine")

TextCallback = Callable[[str], None]


@dataclass(frozen=True)
class TurnResult:
    reply: str
    reply_ids: list[int]
    stop: str
    prompt_tokens: int
    prefill_s: float
    decode_s: float
    event_id: str | None  # the assistant event written to the stream, if one was

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
        self.stream = StreamLog(SessionFiles(self.data_dir, name).stream)
        self.conversation = Conversation(model, policy, backend=backend)
        self.transcript = Transcript(model.template, model.tokenizer, model.fingerprint,
                                     model.config.vocab_size)
        self.snapshots = Snapshotter(self.conversation, SessionFiles(self.data_dir, name).snapshot)
        self.last_event_id: str | None = None
        self.unusable: str | None = None  # why the state cannot be trusted (reopen it)
        self.stream_offset = 0  # bytes of the stream that boot consumed
        self.last_turn: LastTurn | None = None  # what an undo can roll back to
        # Tokens of the stream this state never took in: a replay capped at a ring's worth
        # leaves the oldest out (replay.py), so the clock counts that many fewer. Saved with
        # the snapshot, so that a warm state can still be checked against a cold replay.
        self.skipped_tokens = 0
        self.stop_ids = model.tokenizer.end_of_generation_ids  # llama.cpp's EOG set
        self.owner: SessionLock | None = None  # held from `open` to `close`
        # Warnings for the front end that no request asked for (a model file replaced on
        # disk); taken by whoever reports them.
        self.notes: list[str] = []

    # -- ownership --------------------------------------------------------------------------
    def open(self, cold: bool = False, progress: ReplayProgress | None = None,
             owner: SessionLock | None = None) -> BootReport:
        """Take the session's lock (or hold `owner`, taken before, say, a model loads),
        then boot; the lock is held until `close`. Raises SessionBusyError, changing
        nothing, when another Channel has the session open."""
        if self.owner is None:
            self.owner = owner or acquire_session(self.data_dir, self.name)
        try:
            return self.boot(cold, progress)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Give the session's lock back, once any snapshot being written has landed (the
        next owner must not boot from a file this one is still replacing)."""
        if self.owner is None:
            return
        try:
            self.snapshots.wait()
        finally:
            self.owner.release()
            self.owner = None
        # Warnings for the front end that no request asked for (a model file replaced on
        # disk); taken by whoever reports them.
        self.notes: list[str] = []

    # -- boot and restore -------------------------------------------------------------------
    def boot(self, cold: bool = False, progress: ReplayProgress | None = None) -> BootReport:
        """Warm boot from the snapshot if it validates, else cold boot from the stream."""
        t0 = time.perf_counter()
        self.last_turn = None
        warnings = [w for w in [self.snapshots.remove_stale_tmp()] if w]
        read = self.stream.read()
        self.stream_offset = read.end_offset
        if not read.events:
            system = self.model.template.default_system_prompt()
            if system is not None:
                read = StreamRead([self.stream.append("system", system)], read.warnings,
                                  read.end_offset)
        read_ms = (time.perf_counter() - t0) * 1e3
        report = booting.load(self, read, "--cold: snapshot ignored" if cold else None, progress)
        report.phases_ms = {"read_stream": read_ms, **report.phases_ms}
        report.warnings = warnings + list(read.warnings)
        return report

    def restore_now(self, progress: ReplayProgress | None = None) -> BootReport:
        """Reload the last snapshot (waiting for any save in flight), then replay past it.
        A snapshot that cannot be used raises SnapshotError and changes nothing."""
        self.snapshots.wait()
        self.last_turn = None
        read = self.stream.read()
        try:
            return booting.warm(self, read, progress)
        except StreamOrderError as exc:
            return booting.cold(self, read.events, f"warm boot refused: {exc}", progress)

    def rebuild(self) -> BootReport:
        """Rebuild the working state from the snapshot and the stream (cold if it must)."""
        self.last_turn = None
        read = self.stream.read()
        self.stream_offset = read.end_offset
        return booting.load(self, read, None, None)

    def behind_anchor(self, event: StreamEvent) -> bool:
        """`event` comes before the last event the state includes: another program's line
        this process takes in only now. Fed now, the ring would hold it after lines the
        stream has after it (replay.py's ring order); a rebuild feeds it in its place."""
        return self.last_event_id is not None and event.id < self.last_event_id

    # -- turns ------------------------------------------------------------------------------
    def begin_turn(self, text: str, max_tokens: int | None = None) -> PendingTurn:
        """Render the user's message, then log it (fsynced): nothing is logged for a
        message the template cannot take. The reply length asked for is logged with it,
        for whoever answers the message if this process cannot."""
        if not text.strip():
            raise ValueError("empty message")
        self.check_usable()
        self.check_model_files()
        mark = self.transcript.mark()
        prompt = self.transcript.user_turn(text)
        asked = {} if max_tokens is None else {MAX_TOKENS: max_tokens}
        try:
            event = self.stream.append("user", text, **asked)
        except BaseException:
            self.transcript.rewind(mark)
            raise
        return PendingTurn(event, prompt, mark[2], mark, max_tokens=max_tokens)

    def begin_external(self, event: StreamEvent) -> PendingTurn:
        """A user event another program appended to the stream, to answer as if typed here."""
        self.check_usable()
        self.check_model_files()
        mark = self.transcript.mark()
        return PendingTurn(event, self.transcript.event_tokens(event, generation_prompt=True),
                           mark[2], mark, max_tokens=asked_max_tokens(event))

    def begin_pending(self) -> PendingTurn | None:
        """The last user message if the transcript ends unanswered (say, after a crash
        mid-turn, or a message sent while no engine ran); None if there is none. The ring
        holds every unanswered message already: one reply answers them all."""
        self.check_model_files()
        if not self.transcript.pending_user():
            return None
        events = self.stream.read().events
        user = next(e for e in reversed(taken_in(events, withdrawn_ids(events)))
                    if e.role == "user")
        return PendingTurn(user, self.transcript.generation_prompt(), False,
                           max_tokens=asked_max_tokens(user))

    def turn(self, text: str, settings: SamplingSettings, max_tokens: int,
             on_text: TextCallback | None = None,
             should_stop: StopCheck | None = None) -> TurnResult:
        """Log the user's message (fsynced first), answer it, log the answer."""
        return self.respond(self.begin_turn(text, max_tokens), settings, max_tokens, on_text,
                            should_stop)

    def respond(self, turn: PendingTurn, settings: SamplingSettings, max_tokens: int,
                on_text: TextCallback | None = None, should_stop: StopCheck | None = None,
                shutting_down: StopCheck | None = None) -> TurnResult:
        """Prefill a logged message and decode the reply; log the reply.

        A prompt longer than one prefill chunk can be stopped between chunks. It is preceded
        by a checkpoint, so that taking a cancelled message back out of the ring is a
        restore, not a replay. A stop while `shutting_down()` keeps the message instead, for
        the next open to answer, as after a crash: the checkpoint on disk is the state before
        it, and this half-fed state is never saved.
        """
        self.last_turn = None
        if turn.prefilled is not None:  # a regenerate: the prompt is in the ring already
            with self._withdrawn_on_failure(turn):
                return self._decode(turn, settings, max_tokens, on_text, should_stop, 0.0,
                                    turn.prefilled)
        long = len(turn.prompt) > self.conversation.policy.prefill_chunk
        if long:
            self._checkpoint(turn.awaiting_before)
        self._advance_anchor(turn.event.id)
        before = TurnPoint(self.conversation.ring.mark(), turn.transcript_before)
        self.conversation.ring.mark_turn_start()
        t0 = time.perf_counter()
        with self._withdrawn_on_failure(turn):
            logits = self.conversation.ingest(turn.prompt,
                                              should_stop=should_stop if long else None)
        prefill_s = time.perf_counter() - t0
        if logits is None and shutting_down is not None and shutting_down():
            self.unusable = "a shutdown stopped its prefill (the next open answers the message)"
            return TurnResult("", [], "cancelled", 0, prefill_s, 0.0, None)
        if logits is None:
            mark = self._withdraw(turn, "cancelled")
            return TurnResult("", [], "cancelled", 0, prefill_s, 0.0, mark.id)
        with self._withdrawn_on_failure(turn):
            return self._decode(turn, settings, max_tokens, on_text, should_stop, prefill_s,
                                before)

    @contextlib.contextmanager
    def _withdrawn_on_failure(self, turn: PendingTurn) -> Iterator[None]:
        try:
            yield
        except Exception:
            log.exception("%s: the turn failed after its message was logged", self.name)
            with contextlib.suppress(Exception):  # the original error is the one to report
                self._withdraw(turn, "error")
            raise

    def _decode(self, turn: PendingTurn, settings: SamplingSettings, max_tokens: int,
                on_text: TextCallback | None, should_stop: StopCheck | None,
                prefill_s: float, before: TurnPoint) -> TurnResult:
        conv = self.conversation
        prompted = TurnPoint(conv.ring.mark(), self.transcript.mark(),
                             None if conv.last_logits is None else conv.last_logits.copy())
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
            **{IN_REPLY_TO: turn.event.id},
        )
        self.last_event_id = event.id
        self.last_turn = LastTurn(turn.event.id, event.id, before, prompted, conv.ring.clock)
        return TurnResult(reply, gen.ids, gen.stop, len(turn.prompt), prefill_s, gen.decode_s,
                          event.id)

    def _withdraw(self, turn: PendingTurn, stop: str) -> StreamEvent:
        """Take a message the ring holds only part of back out: log that it is withdrawn
        (the stream keeps it), then rebuild the state without it."""
        try:
            mark = self.stream.append("assistant", "", tokens=[], model=self.model.fingerprint,
                                      stop=stop, **{WITHDRAWS: turn.event.id})
        finally:  # even unlogged, the half-ingested prompt must go: rebuild from the stream
            try:
                self.rebuild()
            except Exception as exc:
                # Never save or extend a ring that holds half a message.
                self.unusable = f"its state could not be rebuilt ({exc})"
                raise
        return mark

    def ingest_event(self, event: StreamEvent) -> int:
        """Feed a non-user event another program appended (no reply); tokens fed."""
        self.last_turn = None
        tokens = self.transcript.event_tokens(event, generation_prompt=False)
        if tokens:
            self.conversation.ingest(tokens)
        self._advance_anchor(event.id)
        return len(tokens)

    def _advance_anchor(self, event_id: str) -> None:
        """Make `event_id` the last stream event the state includes, unless a later one is
        already. An event picked up late (another program's, appended before our own
        latest) must not move the anchor back: a warm boot would feed the events after it,
        which the state holds already, a second time. Ids increase in file order."""
        if self.last_event_id is None or \
                int(ULID.from_str(event_id)) > int(ULID.from_str(self.last_event_id)):
            self.last_event_id = event_id

    # -- saves ------------------------------------------------------------------------------
    def save(self, wait: bool = True,
             on_done: Callable[[SaveResult], None] | None = None) -> SaveResult:
        """Checkpoint the working state, anchored at the last stream event it includes."""
        return self._save(self.transcript.awaiting_reply, wait, on_done)

    def _save(self, awaiting_reply: bool, wait: bool,
              on_done: Callable[[SaveResult], None] | None) -> SaveResult:
        self.check_usable()
        if self.last_event_id is None:
            raise StreamError("nothing to save: the session has no stream events")
        info = {"awaiting_reply": awaiting_reply, "session": self.name,
                "skipped_tokens": self.skipped_tokens}
        return self.snapshots.save(self.last_event_id, info, wait=wait, on_done=on_done)

    def check_usable(self) -> None:
        """Raise StreamError when an earlier failure left the session needing a reopen."""
        if self.unusable:
            raise StreamError(f"session {self.name!r} must be reopened: {self.unusable}")

    def check_model_files(self) -> None:
        """Before a turn changes anything: raise ModelFileChangedError when a file the
        weights are mapped from was truncated or rewritten in place, since reading it could
        kill the process (SIGBUS). A GGUF replaced on disk is only noted: the engine keeps
        running on the one it mapped."""
        try:
            notes = self.model.check_files()
        except ModelFileChangedError as exc:
            log.error("%s: %s", self.name, exc)
            raise
        for note in notes:
            log.warning("%s: %s", self.name, note)
        self.notes.extend(notes)

    def take_notes(self) -> list[str]:
        notes, self.notes = self.notes, []
        return notes

    def _checkpoint(self, awaiting_reply: bool) -> None:
        """Save the state as it is before a long prompt (the transcript has moved on to the
        prompt already: `awaiting_reply` is what the ring holds)."""
        self.snapshots.wait()
        if self.last_event_id is None:
            return
        result = self._save(awaiting_reply, True, None)
        if result.status is SnapshotStatus.FAILED:
            log.warning("%s: no checkpoint before a long prompt (%s); a cancel will replay",
                        self.name, result.error)
