"""Answering a message: log it, prefill it, decode the reply, log the reply (a mixin of
Session, session.py).

A turn logs its message only once everything about it has been checked and its prompt
rendered. A turn that cannot finish after that (cancelled mid-prefill, or failed) withdraws
its message and rebuilds the state without it, so the ring never holds half a message.
Each reply names the message it answers (`in_reply_to`), so that a replay feeds them in the
order the ring took them (replay.py's ring order).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..conversation import StopCheck
from ..snapshot.snapshotter import SnapshotStatus
from ..state.sampler import SamplingSettings
from ..state.sampling import another_seed
from .alternatives import RESTORES, reply_origin
from .replay import IN_REPLY_TO, WITHDRAWS, taken_in, withdrawn_ids
from .stream import StreamEvent
from .turns import MAX_TOKENS, LastTurn, PendingTurn, TurnPoint, asked_max_tokens
from .undo import reply_seed

if TYPE_CHECKING:
    from .session import Session

log = logging.getLogger("channel.engine")

TextCallback = Callable[[str], None]
ReadProgress = Callable[[int, int], None]  # (tokens of the message read so far, its total)


@dataclass(frozen=True)
class TurnResult:
    reply: str
    reply_ids: list[int]
    stop: str
    prompt_tokens: int
    prefill_s: float
    decode_s: float
    event_id: str | None  # the assistant event written to the stream, if one was
    seed: int | None = None  # the seed the reply was sampled with; None: greedy
    first_token_s: float = 0.0  # from the end of the prefill to the first token
    withdraws: str | None = None  # the message taken back out (stopped while being read)

    @property
    def prefill_tok_s(self) -> float:
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tok_s(self) -> float:
        return len(self.reply_ids) / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def ttft_ms(self) -> float:
        """Time to first token: reading the message, then sampling the reply's first token
        (a regenerate reads nothing)."""
        return (self.prefill_s + self.first_token_s) * 1e3

    def speed_fields(self) -> dict[str, float]:
        """The figures people compare, as the reply's event and end_of_turn carry them."""
        return {"ttft_ms": round(self.ttft_ms, 1), "prefill_tok_s": round(self.prefill_tok_s, 2),
                "decode_tok_s": round(self.decode_tok_s, 2)}


class Answering:
    def begin_turn(self: Session, text: str, max_tokens: int | None = None) -> PendingTurn:
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

    def begin_external(self: Session, event: StreamEvent) -> PendingTurn:
        """A user event another program appended to the stream, to answer as if typed here."""
        self.check_usable()
        self.check_model_files()
        mark = self.transcript.mark()
        return PendingTurn(event, self.transcript.event_tokens(event, generation_prompt=True),
                           mark[2], mark, max_tokens=asked_max_tokens(event))

    def begin_pending(self: Session) -> PendingTurn | None:
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

    def turn(self: Session, text: str, settings: SamplingSettings, max_tokens: int,
             on_text: TextCallback | None = None,
             should_stop: StopCheck | None = None) -> TurnResult:
        """Log the user's message (fsynced first), answer it, log the answer."""
        return self.respond(self.begin_turn(text, max_tokens), settings, max_tokens, on_text,
                            should_stop)

    def respond(self: Session, turn: PendingTurn, settings: SamplingSettings, max_tokens: int,
                on_text: TextCallback | None = None, should_stop: StopCheck | None = None,
                shutting_down: StopCheck | None = None,
                on_read: ReadProgress | None = None,
                reuse: StreamEvent | None = None) -> TurnResult:
        """Prefill a logged message and decode the reply; log the reply.

        A prompt longer than one prefill chunk can be stopped between chunks. It is preceded
        by a checkpoint, so that taking a cancelled message back out of the ring is a
        restore, not a replay. A stop while `shutting_down()` keeps the message instead, for
        the next open to answer, as after a crash: the checkpoint on disk is the state before
        it, and this half-fed state is never saved. `on_read` hears how much of a long prompt
        has been read, after each prefill chunk. With `reuse` (an earlier reply to the
        message: alternatives.py), that reply is taken in again instead of a new one decoded.
        """
        self.last_turn = None
        if turn.prefilled is not None:  # a regenerate: the prompt is in the ring already
            with self._withdrawn_on_failure(turn):
                if reuse is not None:
                    return self._reuse(turn, reuse, 0.0, turn.prefilled)
                return self._decode(turn, settings, max_tokens, on_text, should_stop, 0.0,
                                    turn.prefilled)
        long = len(turn.prompt) > self.conversation.policy.prefill_chunk
        if long:
            self._checkpoint(turn.awaiting_before)
        self._advance_anchor(turn.event.id)
        before = TurnPoint(self.conversation.ring.mark(), turn.transcript_before)
        self.conversation.ring.mark_turn_start()
        t0 = time.perf_counter()
        total = len(turn.prompt)
        progress = None if on_read is None or not long else (lambda done: on_read(done, total))
        with self._withdrawn_on_failure(turn):
            logits = self.conversation.ingest(turn.prompt,
                                              should_stop=should_stop if long else None,
                                              on_progress=progress)
        prefill_s = time.perf_counter() - t0
        if logits is None and shutting_down is not None and shutting_down():
            self.unusable = "a shutdown stopped its prefill (the next open answers the message)"
            return TurnResult("", [], "cancelled", 0, prefill_s, 0.0, None)
        if logits is None:
            mark = self._withdraw(turn, "cancelled")
            return TurnResult("", [], "cancelled", 0, prefill_s, 0.0, mark.id,
                              withdraws=turn.event.id)
        with self._withdrawn_on_failure(turn):
            if reuse is not None:
                return self._reuse(turn, reuse, prefill_s, before)
            return self._decode(turn, settings, max_tokens, on_text, should_stop, prefill_s,
                                before)

    @contextlib.contextmanager
    def _withdrawn_on_failure(self: Session, turn: PendingTurn) -> Iterator[None]:
        try:
            yield
        except Exception:
            log.exception("%s: the turn failed after its message was logged", self.name)
            with contextlib.suppress(Exception):  # the original error is the one to report
                self._withdraw(turn, "error")
            raise

    def _decode(self: Session, turn: PendingTurn, settings: SamplingSettings, max_tokens: int,
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

        if settings.seed is None and turn.retried_seed is not None and not settings.greedy:
            settings = replace(settings, seed=another_seed(turn.retried_seed))
        gen = self.conversation.generate(settings, max_tokens, self.stop_ids, emit, should_stop)
        reply = self.model.tokenizer.decode(gen.ids)
        self.conversation.ingest(self.transcript.close_assistant(reply))
        result = TurnResult(reply, gen.ids, gen.stop, len(turn.prompt), prefill_s, gen.decode_s,
                            None, gen.seed, gen.first_token_s)
        # The settings and seed make the reply reproducible from the state before it; the
        # speed figures stay with it across restarts.
        seed = {} if gen.seed is None else {"seed": gen.seed}
        event = self.stream.append(
            "assistant", reply, tokens=gen.ids, model=self.model.fingerprint, stop=gen.stop,
            **settings.record(), **seed, **result.speed_fields(), **{IN_REPLY_TO: turn.event.id},
        )
        self.last_event_id = event.id
        self.last_turn = LastTurn(turn.event.id, event.id, before, prompted, conv.ring.clock)
        return replace(result, event_id=event.id)

    def _reuse(self: Session, turn: PendingTurn, earlier: StreamEvent, prefill_s: float,
               before: TurnPoint) -> TurnResult:
        """Take an earlier reply to the message in again, as a replay would feed it (its
        recorded tokens, then the template's close), and log it as restoring that reply."""
        conv = self.conversation
        prompted = TurnPoint(conv.ring.mark(), self.transcript.mark(),
                             None if conv.last_logits is None else conv.last_logits.copy())
        ids = list(earlier.extra["tokens"])
        conv.ingest(ids + self.transcript.close_assistant(earlier.content))
        event = self.stream.append("assistant", earlier.content, **{
            **earlier.extra, IN_REPLY_TO: turn.event.id, RESTORES: reply_origin(earlier)})
        self.last_event_id = event.id
        self.last_turn = LastTurn(turn.event.id, event.id, before, prompted, conv.ring.clock)
        stop = earlier.extra.get("stop")
        # Nothing was decoded: no decode figures (the event keeps the reply's own).
        return TurnResult(earlier.content, ids, stop if isinstance(stop, str) else "eot",
                          len(turn.prompt), prefill_s, 0.0, event.id, reply_seed(earlier))

    def _withdraw(self: Session, turn: PendingTurn, stop: str) -> StreamEvent:
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

    def _checkpoint(self: Session, awaiting_reply: bool) -> None:
        """Save the state as it is before a long prompt (the transcript has moved on to the
        prompt already: `awaiting_reply` is what the ring holds)."""
        self.snapshots.wait()
        if self.last_event_id is None:
            return
        result = self._save(awaiting_reply, True, None)
        if result.status is SnapshotStatus.FAILED:
            log.warning("%s: no checkpoint before a long prompt (%s); a cancel will replay",
                        self.name, result.error)
