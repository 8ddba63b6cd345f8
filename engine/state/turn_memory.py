"""Which turns the ring still holds: for each recorded turn, its tokens and how many of them
are live slots, so front ends can mark what the model can no longer see.

A turn starts where `KVRing.mark_turn_start` recorded it (a user message) and runs to the next
turn's start, its reply included. Slots keep their ingest clock and stay in ingest order, so a
turn's live slots are one `searchsorted` range of `slot_clock` per boundary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ring import KVRing


@dataclass(frozen=True)
class TurnMemory:
    tokens: int  # the turn's tokens as ingested (a replay counts only those it fed)
    kept: int  # how many of them are still live slots
    first_slot: int | None  # the slot of its oldest kept token, None if none is kept

    @property
    def state(self) -> str:
        """'whole', 'partly' (some tokens evicted) or 'forgotten' (none left)."""
        if self.kept >= self.tokens:
            return "whole"
        return "partly" if self.kept else "forgotten"


def turn_memory(ring: KVRing) -> tuple[list[TurnMemory], bool]:
    """The recorded turns, oldest first, and whether the ring holds nothing from before the
    oldest of them (only the newest MAX_TURN_BOUNDARIES turns are recorded, and a cold replay
    records only the turns it fed, so older messages may exist that no turn stands for)."""
    v = ring.arena.views()
    n, anchors, clock = ring.n_active, ring.n_anchors, ring.clock
    starts = ring.turn_boundaries()
    if not starts:
        return [], False
    clocks = v.slot_clock[anchors:n]  # ascending: slots stay in ingest order
    # A turn marked at clock c holds the tokens stamped c+1 .. next turn's mark (inclusive).
    ends = [*starts[1:], clock]
    lo = np.searchsorted(clocks, np.asarray(starts, np.uint64), side="right")
    hi = np.searchsorted(clocks, np.asarray(ends, np.uint64), side="right")
    turns = [TurnMemory(tokens=end - start, kept=int(h - low),
                        first_slot=anchors + int(low) if h > low else None)
             for start, end, low, h in zip(starts, ends, lo.tolist(), hi.tolist())]
    older_forgotten = n == anchors or int(clocks[0]) > starts[0]
    return turns, older_forgotten
