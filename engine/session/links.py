"""Which saved state a warm boot restores: the newest link of the snapshot's chains that the
stream agrees with (docs/snapshot.md, "Every turn restorable").

The live chain is tried first, then the archived generations, newest first. A link is
refused when a later line of the stream took back a message its state holds (an undo, a
rewind): the newest link before that is the state to continue from, and the events after
its anchor are replayed. A warm boot, the rebuild after an undo and a rewind all go here,
so each restores the nearest kept turn rather than replaying the whole stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..snapshot.archive import generations
from ..snapshot.chain import ChainReport, LinkRefusedError, restore
from ..snapshot.format import SnapshotError
from .replay import ring_order, withdrawn_ids
from .stream import StreamEvent, StreamRead

if TYPE_CHECKING:
    from .session import Session


class StreamOrderError(ValueError):
    """The stream's ids make the snapshot's anchor ambiguous: a warm boot could diverge."""


@dataclass
class LinkChoice:
    report: ChainReport
    base: Path  # the chain's base: the live one, or an archived generation's
    archived: bool


def first_index(events: list[StreamEvent]) -> dict[str, int]:
    first: dict[str, int] = {}
    for i, event in enumerate(events):
        first.setdefault(event.id, i)
    return first


def newest_link(session: Session, read: StreamRead, apply: bool = True) -> LinkChoice:
    """Restore (apply=False: only find) the newest link the stream agrees with. Raises
    SnapshotError if the live base is unusable, StreamOrderError if no link will do; the
    conversation is untouched then."""
    first = first_index(read.events)

    def refusal(anchor: str) -> str | None:
        try:
            split_at_anchor(read, first[anchor])
        except StreamOrderError as exc:
            return str(exc)
        return None

    live = session.snapshots.path
    problem = ""
    for base in [live, *(g.base for g in generations(live))]:
        try:
            report = restore(session.conversation, base, known_ids=first.keys(),
                             refuse=refusal, apply=apply)
        except LinkRefusedError as exc:
            problem = problem or str(exc)
            continue
        except SnapshotError:
            if base == live:
                raise
            continue  # an archived generation that no longer reads: try an older one
        return LinkChoice(report, base, base != live)
    raise StreamOrderError(problem)


def split_at_anchor(read: StreamRead, anchor: int) -> tuple[list[StreamEvent],
                                                             list[StreamEvent]]:
    """The events a snapshot anchored at events[anchor] holds, and those it does not, in
    ring order (replay.ring_order: the snapshot holds a prefix of that order, not of the
    stream, when replies came after later questions). StreamOrderError where the stream
    makes the anchor ambiguous: an id after it that repeats or goes back, or a later line
    withdrawing a message the snapshot holds."""
    late = [why for i, why in sorted(read.disorder.items()) if i > anchor]
    if late:
        raise StreamOrderError(f"{late[0]}, after the snapshot's anchor")
    order = ring_order(read.events)
    cut = next(i for i, e in enumerate(order) if e is read.events[anchor]) + 1
    held, after = order[:cut], order[cut:]
    ids = {e.id for e in held}
    for event in after:
        if withdrawn_ids([event]) & ids:
            raise StreamOrderError(f"event {event.id} withdraws a message the snapshot holds")
    return held, after
