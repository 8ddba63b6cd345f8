"""Rewind: continue a session from the end of an earlier turn, warm where a save kept it.

The turns after the chosen one are taken back with one retraction in the stream (as undo
does: never a rewrite), and the state is rebuilt from the newest saved link the stream then
agrees with (links.py): the link saved at that turn, or the nearest before it and a replay
of what lies between. Only when no link that old is kept does it replay the whole stream;
`plan_rewind` says which it will be before anything changes.

Turns are the exchanges of the transcript as the ring holds it: turn N is the N-th user
message and its reply (if any); turn 0 is the bare system prompt.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ulid import ULID

from .links import StreamOrderError, first_index, newest_link, split_at_anchor
from .replay import RETRACTS, taken_in, withdrawn_ids
from .stream import StreamEvent, StreamRead, _now

if TYPE_CHECKING:
    from .session import Session


@dataclass(frozen=True)
class RewindPlan:
    turn: int  # the turn the session continues from
    turns: int  # turns the transcript has now
    retracted: list[str]  # the ids a rewind takes back
    kind: str  # "warm": a kept link and a replay of what follows it; "replay": the stream
    link: str  # the link, in words ("kept in the snapshot and 12 segment(s)"), or ""
    replay_events: int  # events re-read after the link (all kept ones for "replay")

    def describe(self) -> str:
        if self.kind == "warm":
            return (f"back to turn {self.turn} of {self.turns}: restores the state {self.link}"
                    f", then re-reads {self.replay_events} message(s)")
        return (f"back to turn {self.turn} of {self.turns}: no saved state that old is kept, "
                f"so it re-reads the conversation ({self.replay_events} messages)")


@dataclass(frozen=True)
class RewindReport:
    plan: RewindPlan
    retraction: StreamEvent
    kind: str  # what the rebuild did: "warm" or "cold"
    ms: float


def _turn_spans(kept: list[StreamEvent]) -> list[tuple[int, int]]:
    """(first, last) index in `kept` of each turn: a user message, through its reply."""
    spans: list[tuple[int, int]] = []
    for i, event in enumerate(kept):
        if event.role == "user":
            spans.append((i, i))
        elif event.role == "assistant" and spans:
            spans[-1] = (spans[-1][0], i)
    return spans


def turn_ends(events: list[StreamEvent]) -> list[str]:
    """The id of the last event of each turn, in ring order (the kept events only)."""
    kept = taken_in(events, withdrawn_ids(events))
    return [kept[last].id for _, last in _turn_spans(kept)]


def later_turns(events: list[StreamEvent], turn: int) -> tuple[list[str], int]:
    """The kept message ids after turn `turn`, and how many turns there are."""
    kept = taken_in(events, withdrawn_ids(events))
    spans = _turn_spans(kept)
    if not 0 <= turn < len(spans):
        raise ValueError(f"no turn {turn} to go back to: the conversation has "
                         f"{len(spans)} turn(s), and rewinding goes back to turns "
                         f"0..{max(len(spans) - 1, 0)}")
    start = spans[0][0] if turn == 0 else spans[turn - 1][1] + 1
    return [e.id for e in kept[start:]], len(spans)


def plan_rewind(session: Session, turn: int) -> RewindPlan:
    """What rewinding to `turn` would do; changes nothing. ValueError for a bad turn."""
    read = session.stream.read()
    retracted, turns = later_turns(read.events, turn)
    # The stream as it will be: the retraction appended (an id after every other).
    retraction = StreamEvent(str(ULID()), "assistant", "", _now(), {RETRACTS: retracted})
    then = StreamRead([*read.events, retraction], [], read.end_offset, dict(read.disorder))
    try:
        choice = newest_link(session, then, apply=False)
    except (StreamOrderError, OSError, ValueError):
        choice = None
    kept_then = taken_in(then.events, withdrawn_ids(then.events))
    if choice is None:
        return RewindPlan(turn, turns, retracted, "replay", "", len(kept_then))
    _, after = split_at_anchor(then, first_index(then.events)[choice.report.stream_id])
    later = taken_in(after, withdrawn_ids(then.events))
    where = "an archived snapshot" if choice.archived else "the snapshot"
    link = f"kept in {where} and {choice.report.segments} segment(s)"
    return RewindPlan(turn, turns, retracted, "warm", link, len(later))


def rewind(session: Session, turn: int) -> RewindReport:
    """Take back every turn after `turn` and rebuild the state there (see the module doc)."""
    session.check_usable()
    session.check_model_files()  # the rebuild reads weights
    session.snapshots.wait()  # a writer reading the live rows must finish first
    t0 = time.perf_counter()
    plan = plan_rewind(session, turn)
    retraction = session.stream.append(
        "assistant", "", tokens=[], model=session.model.fingerprint, stop="retracted",
        **{RETRACTS: plan.retracted})
    session.last_event_id = retraction.id
    session.snapshots.last_clock = None
    boot = session.rebuild()
    session.last_turn = None
    return RewindReport(plan, retraction, boot.kind, (time.perf_counter() - t0) * 1e3)
