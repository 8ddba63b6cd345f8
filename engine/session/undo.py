"""Undo and regenerate: take the last turn back out without re-encoding anything.

Slots are kept in ingest order, so the ring before a turn is the ring after it with the turn's
slots dropped and the older slots' salience restored (ring.py: RingMark). A session keeps two
points of its last turn: before the user's prompt and after it (with the logits there). An
undo rolls back to the first; a regenerate to the second, and decodes again from the kept
logits. Either way a retraction is appended to the stream first (`retracts: [ids]`, never a
rewrite: docs/stream.md), so a replay, a warm boot and the transcript all agree.

A regenerate answers with another seed than the reply it took back (unless asked for one):
the pending turn carries that reply's recorded seed (`retried_seed`), and the answer derives
a new one from it (session/answering.py).

When the ring cannot be rolled back (it evicted or rebased during the turn, the engine
restarted since, another program appended after it), the state is rebuilt from the snapshot
and the stream instead, and the report says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..state.sampling import SEED_LIMIT
from .replay import RETRACTS, taken_in, withdrawn_ids
from .stream import StreamEvent
from .turns import PendingTurn, TurnPoint

if TYPE_CHECKING:
    from .session import Session


@dataclass(frozen=True)
class EditReport:
    method: str  # "rollback" (nothing re-encoded) or "replay"
    reason: str  # why it had to replay; "" for a rollback
    retraction: StreamEvent
    retracted: list[str]
    dropped_slots: int
    ms: float


def last_exchange(session: Session, events: list[StreamEvent] | None = None
                  ) -> tuple[StreamEvent, StreamEvent]:
    """The last user message and its reply, as the ring holds them (from `events`, the
    stream's, when the caller has read them); ValueError if the conversation does not end
    with an answered message."""
    events = session.stream.read().events if events is None else events
    kept = taken_in(events, withdrawn_ids(events))
    if len(kept) < 2 or kept[-1].role != "assistant" or kept[-2].role != "user":
        raise ValueError("nothing to undo: the conversation does not end with a reply")
    return kept[-2], kept[-1]


def _rollback_problem(session: Session, reply_id: str, point_of: str) -> str | None:
    last = session.last_turn
    ring = session.conversation.ring
    if last is None or last.reply_id != reply_id:
        return "the turn was not answered in this engine run"
    if ring.clock != last.clock or session.last_event_id != reply_id:
        return "the ring took in more after the turn"
    point = last.before if point_of == "before" else last.prompted
    if point.transcript is None:
        return "the transcript before the turn is not known"
    if point_of == "prompted" and point.logits is None:
        return "the logits after the prompt were not kept"
    return ring.rollback_problem(point.ring)


def undo(session: Session, keep_user: bool = False) -> tuple[EditReport, PendingTurn | None]:
    """Retract the last reply (keep_user: to answer the message again) or the whole turn.

    Returns the report and, with keep_user, the turn to answer again (a PendingTurn whose
    prompt the ring already holds when it rolled back; one to prefill after a replay).
    """
    session.check_usable()
    session.check_model_files()  # before the retraction: a rebuild or decode reads weights
    session.snapshots.wait()  # a writer reading the live rows must finish first
    t0 = time.perf_counter()
    user, reply = last_exchange(session)
    retracted = [reply.id] if keep_user else [user.id, reply.id]
    point_of = "prompted" if keep_user else "before"
    problem = _rollback_problem(session, reply.id, point_of)
    last = session.last_turn
    retraction = session.stream.append(
        "assistant", "", tokens=[], model=session.model.fingerprint, stop="retracted",
        **{RETRACTS: retracted})
    session.last_event_id = retraction.id
    session.snapshots.last_clock = None  # the clock may come back to a saved value
    dropped = 0
    if problem is None and last is not None:
        point = last.prompted if keep_user else last.before
        dropped = session.conversation.ring.rollback(point.ring)
        assert point.transcript is not None
        session.transcript.rewind(point.transcript)
        session.conversation.last_logits = point.logits
        session.last_turn = None
        pending = _again(session, user, last.before) if keep_user else None
    else:
        session.rebuild()  # the retraction is in the stream: the rebuild leaves them out
        pending = session.begin_pending() if keep_user else None
    if pending is not None:
        pending = replace(pending, retried_seed=reply_seed(reply))
    report = EditReport("rollback" if problem is None else "replay", problem or "",
                        retraction, retracted, dropped, (time.perf_counter() - t0) * 1e3)
    return report, pending


def reply_seed(reply: StreamEvent) -> int | None:
    """The seed a reply was sampled with, as its event recorded it (None: greedy, or older)."""
    seed = reply.extra.get("seed")
    ok = isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < SEED_LIMIT
    return seed if ok else None


def _again(session: Session, user: StreamEvent, before: TurnPoint) -> PendingTurn:
    return PendingTurn(user, [], True, before.transcript, prefilled=before)
