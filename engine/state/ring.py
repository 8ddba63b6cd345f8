"""The K/V ring: which slots are live, where each sits in RoPE space, and what to forget.

Slots [0, n_active) are live and kept in ingest order: the pinned Tier 1 anchors (the system
prompt) first, then everything else oldest to newest. Keeping them compact means attention and
snapshots touch one contiguous range per layer. When the ring is full, a batch of slots outside
the anchors and the recent window is evicted, chosen by the policy's scores (evict_policy.py),
and the survivors slide down in order.
When positions near the model's context length, a rebase (rebase.py) re-indexes live slots
to 0..n-1 by re-rotating their cached keys.

A hybrid model's other layers (arena.py's add_layer_planes) follow the token stream instead:
the ring's policy never touches them, a rebase shifts the window planes' keys by the same
amount as the newest slot's (so distances within the window stay exact), and a mark keeps a
copy of them so that a rollback is still exact.

All numbers live in the arena; this class holds only references, so a restored arena is the
whole truth.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..model.config import ModelConfig
from ..model.rope import Rope
from .arena import (
    CLOCK,
    EVICTED,
    LAYER_PLANES,
    MAX_TURN_BOUNDARIES,
    N_ACTIVE,
    N_ANCHORS,
    NEXT_POS,
    REBASES,
    TOTAL_INGESTED,
    TURNS,
    StateArena,
)
from .compaction import compact_slots
from .evict_policy import TurnSpans, choose_victims, score_scale, update_scores
from .rebase import rebase
from .ring_policy import RingPolicy


class RingFullError(ValueError):
    """The anchors leave no room for ordinary tokens in a ring this small."""


class RollbackError(ValueError):
    """The ring cannot be rolled back to a mark without re-encoding (it evicted or rebased
    since, or the mark is not behind it)."""


@dataclass(frozen=True)
class RingMark:
    """What the ring was at some point: its counters and its live slots' salience. Later
    tokens only add slots after these and change these slots' salience, so restoring both
    and truncating the newer slots is an exact rollback (unless an eviction or rebase moved
    or rewrote the slots meanwhile)."""

    counters: np.ndarray  # a copy of ring_counters
    salience: np.ndarray  # a copy of slot_salience[:n_active]
    planes: dict[str, np.ndarray]  # copies of the layer planes outside the ring (if any)


class RingDevice(Protocol):
    """A backend whose arena the CPU reaches slowly (a GPU's uncached BAR window): the ring has
    it rotate the ring's keys in a rebase and copy the layer planes for a mark, on the
    device, rather than read and write that memory itself."""

    def rotate_keys(self, count: int) -> None:
        """Rotate every ring layer's keys of slots [0, count) by rebase_cos/rebase_sin."""

    def rotate_window_keys(self) -> None:
        """Rotate every row of every WINDOW plane's keys by rebase_cos/rebase_sin row 0."""

    def copy_planes(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Fresh host copies of the named layer planes."""


@dataclass(frozen=True)
class SlotSpan:
    """Slots reserved for `count` new tokens: [start, start + count) at positions pos, pos+1..."""

    start: int
    count: int
    pos: int


class KVRing:
    def __init__(self, arena: StateArena, cfg: ModelConfig, policy: RingPolicy, rope: Rope,
                 window_rope: Rope | None = None):
        self.arena = arena
        self.cfg = cfg
        self.policy = policy
        self.rope = rope  # the ring's (FULL) layers'
        self.window_rope = window_rope or rope  # WINDOW layers', where they differ
        self.planes = tuple(name for name in LAYER_PLANES if name in arena.layout)
        self.device: RingDevice | None = None  # set by a backend whose arena needs one
        # Set while no snapshot is reading the live slots. Eviction and rebase move or rewrite
        # existing rows, so they wait for it; appending new tokens never does.
        self._thawed = threading.Event()
        self._thawed.set()
        # The lowest clock a rollback took the ring back to since a chain segment last read
        # it (None: none). Rows stamped after it may hold new tokens under clocks a saved
        # state already used, so an incremental save must carry them (snapshot/segment.py).
        # In memory only: a restart restores a state that is on disk, with nothing to carry.
        self.rewound_to: int | None = None

    def freeze(self) -> None:
        """Keep live rows where they are (a snapshot writer is reading them)."""
        self._thawed.clear()

    def thaw(self) -> None:
        self._thawed.set()

    # -- counters -------------------------------------------------------------------------
    def _counter(self, index: int) -> int:
        return int(self.arena.views().ring_counters[index])

    @property
    def n_active(self) -> int:
        return self._counter(N_ACTIVE)

    @property
    def n_anchors(self) -> int:
        return self._counter(N_ANCHORS)

    @property
    def clock(self) -> int:
        return self._counter(CLOCK)

    @property
    def next_pos(self) -> int:
        return self._counter(NEXT_POS)

    @property
    def total_ingested(self) -> int:
        return self._counter(TOTAL_INGESTED)

    @property
    def rebases(self) -> int:
        return self._counter(REBASES)

    @property
    def evicted(self) -> int:
        return self._counter(EVICTED)

    def max_admit(self) -> int:
        """The most tokens one reserve() may take: all but the anchors and the recent window."""
        return self.policy.max_slots - self.n_anchors - self.policy.recent_window

    def takes_whole(self, count: int) -> bool:
        """Whether reserve(count) would take `count` tokens with no eviction or rebase: then
        reserving them at once or in any split leaves the ring in the same state."""
        return (count <= self.max_admit() and self._excess_slots(count) <= 0
                and not self._past_context(count))

    def _excess_slots(self, count: int) -> int:
        """How many live slots must go before `count` more fit (reserve evicts them)."""
        return self.n_active + count - self.policy.max_slots

    def _past_context(self, count: int) -> bool:
        """Whether `count` more positions pass the model's context (reserve rebases)."""
        return self.next_pos + count > self.cfg.context_length

    def turn_boundaries(self) -> list[int]:
        """Clock values of the most recent turn starts, oldest first."""
        v = self.arena.views()
        turns = int(v.ring_counters[TURNS])
        kept = min(turns, MAX_TURN_BOUNDARIES)
        return [int(v.turn_starts[(turns - kept + i) % MAX_TURN_BOUNDARIES]) for i in range(kept)]

    # -- mutation -------------------------------------------------------------------------
    def reserve(self, count: int) -> SlotSpan:
        """Make room for `count` tokens (evicting or rebasing if needed) and say where they go.

        The ring is consistent before and after; nothing is live until commit(), so a pass that
        is cancelled between reserve() and commit() leaves no trace.
        """
        if count < 1 or count > self.max_admit():
            raise RingFullError(
                f"cannot admit {count} tokens at once into a ring of {self.policy.max_slots} "
                f"slots holding {self.n_anchors} anchors (at most {self.max_admit()})"
            )
        excess = self._excess_slots(count)
        if excess > 0:
            self._thawed.wait()
            self._evict(excess)
        if self._past_context(count):
            self._thawed.wait()
            rebase(self)
        return SlotSpan(self.n_active, count, self.next_pos)

    def commit(self, span: SlotSpan, mass: np.ndarray, *, anchors: bool = False,
               scored: bool = False) -> None:
        """Make a reserved span live. `mass` (n_active + count,) is the pass's attention mass;
        `scored`: the backend already folded it into `slot_salience` by the policy's rule
        (update_scores), on the device, where reading the arena back would cost more."""
        v = self.arena.views().check()
        c = v.ring_counters
        n, k = int(c[N_ACTIVE]), span.count
        if span.start != n or span.pos != int(c[NEXT_POS]):
            raise ValueError(f"stale slot span {span} (ring now holds {n} slots)")
        if anchors and int(c[N_ANCHORS]) != n:
            raise ValueError("anchors must be the first tokens of a conversation")
        if not scored:
            update_scores(self.policy, v.slot_salience[: n + k], mass[: n + k], n, k,
                          score_scale(self.cfg))
        v.slot_active[n : n + k] = 1
        np.add(v.slot_index[:k], span.pos, out=v.slot_pos[n : n + k])
        np.add(v.slot_index[:k], int(c[CLOCK]) + 1, out=v.slot_clock[n : n + k], casting="unsafe")
        c[N_ACTIVE] = n + k
        c[NEXT_POS] = span.pos + k
        c[CLOCK] = int(c[CLOCK]) + k
        c[TOTAL_INGESTED] = int(c[TOTAL_INGESTED]) + k
        if anchors:
            c[N_ANCHORS] = n + k

    def mark_turn_start(self, clock: int | None = None) -> None:
        """Record that a turn starts at `clock` (default: now)."""
        v = self.arena.views()
        turns = int(v.ring_counters[TURNS])
        v.turn_starts[turns % MAX_TURN_BOUNDARIES] = self.clock if clock is None else clock
        v.ring_counters[TURNS] = turns + 1

    def mark(self) -> RingMark:
        v = self.arena.views()
        n = int(v.ring_counters[N_ACTIVE])
        planes = {name: getattr(v, name).copy() for name in self.planes} \
            if self.device is None or not self.planes else self.device.copy_planes(self.planes)
        return RingMark(v.ring_counters.copy(), v.slot_salience[:n].copy(), planes)

    def rollback_problem(self, mark: RingMark) -> str | None:
        """Why rollback(mark) is impossible, or None."""
        c = self.arena.views().ring_counters
        if int(c[EVICTED]) != int(mark.counters[EVICTED]):
            return "the ring evicted slots since then"
        if int(c[REBASES]) != int(mark.counters[REBASES]):
            return "the ring rebased its positions since then"
        if int(c[CLOCK]) < int(mark.counters[CLOCK]) or \
                int(c[N_ACTIVE]) < int(mark.counters[N_ACTIVE]):
            return "the ring is behind that point"
        return None

    def rollback(self, mark: RingMark) -> int:
        """Drop every slot committed after `mark` and restore the rest as they were then;
        returns the slots dropped. Nothing is re-encoded: the kept rows never moved."""
        problem = self.rollback_problem(mark)
        if problem:
            raise RollbackError(f"cannot roll the ring back: {problem}")
        self._thawed.wait()  # a snapshot writer may be reading rows we are about to reuse
        v = self.arena.views().check()
        n_then, n_now = int(mark.counters[N_ACTIVE]), self.n_active
        v.slot_active[n_then:n_now] = 0
        v.slot_salience[:n_then] = mark.salience
        v.slot_salience[n_then:n_now] = 0.0
        v.ring_counters[:] = mark.counters
        back_to = int(mark.counters[CLOCK])
        self.rewound_to = back_to if self.rewound_to is None else min(self.rewound_to, back_to)
        for name, saved in mark.planes.items():
            np.copyto(getattr(v, name), saved)
        return n_now - n_then

    # -- eviction and rebase ----------------------------------------------------------------
    def _evict(self, need: int) -> None:
        v = self.arena.views().check()
        n, first = self.n_active, self.n_anchors
        end = n - self.policy.recent_window  # candidates: [first, end)
        m = end - first
        k = min(max(need, self.policy.evict_batch), m)
        victims = v.evict_mask[:m]
        turns = self._turn_spans(v.slot_clock[first:end]) if self.policy.evict == "turns" \
            else None
        choose_victims(self.policy, v.slot_salience[first:end], k, victims,
                       v.evict_sorted[:m], v.keep_mask[:m], v.tie_rank[:m], turns,
                       v.evict_key[:m])
        keep = v.keep_mask[: n - first]
        np.logical_not(victims, out=keep[:m])
        keep[m:] = True
        kept = compact_slots(v, keep, first, n)
        v.slot_active[kept:n] = 0
        v.ring_counters[N_ACTIVE] = kept
        v.ring_counters[EVICTED] = self.evicted + k

    def _turn_spans(self, clocks: np.ndarray) -> TurnSpans:
        """The recorded turns among candidates stamped `clocks` (ascending). A turn marked at
        clock c holds the tokens stamped c+1 up to the next turn's mark."""
        starts = np.asarray(self.turn_boundaries(), np.int64)
        ends = np.append(starts[1:], self.clock)
        firsts = np.searchsorted(clocks, starts.astype(np.uint64), side="right")
        return TurnSpans(firsts.astype(np.int64), ends - starts)
