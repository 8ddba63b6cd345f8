"""Eviction policies: how each scores the ring's slots and which slots a full ring forgets.

Every policy keeps the anchors and the recent window and evicts whole batches (ring.py); they
differ only in the per-slot score kept in `slot_salience` and in how victims are picked among
the candidates between the anchors and the recent window (docs/memory.md):

- `salience`: attention mass decayed per ingested token (an EMA), lowest scores go;
- `window`: StreamingLLM, the anchors as attention sinks plus the newest slots: the oldest
  candidates go. Its scores are kept like `salience`, only for the heat map;
- `h2o`: attention mass accumulated without decay ("heavy hitters"), lowest go;
- `tova`: the attention of the latest query only, lowest go. A decode step has one query, so
  its mass is exactly that; a prefill chunk's mass is summed over its queries, and tova uses
  their mean, which every backend provides without a second reduction.
- `turns`: as `salience`, except that short turns (a user message and its reply, as
  `KVRing.mark_turn_start` recorded them, of at most `short_turn` tokens) are kept whole,
  oldest first, while they fill at most `short_turn_share` of the ring's candidates. A fact or
  an instruction is usually stated in a short message, and nothing later attends to it until
  it is asked for, which is when decayed attention has long let it go (docs/memory.md).

Scores are attention mass per layer and head in all of them, so a snapshot taken under one
policy restores into another: the scores carry over and the new policy's updates take over.
All of this runs on the arena's views and scratch, allocating nothing (decode's budget).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.config import ModelConfig
from .ring_policy import RingPolicy


@dataclass(frozen=True)
class TurnSpans:
    """The recorded turns among the eviction candidates, oldest first: where each starts
    (a candidate index, ascending; candidates stay in ingest order, so a turn is a range)
    and how many tokens it had when ingested (however many are left)."""

    firsts: np.ndarray  # (turns,) int64
    tokens: np.ndarray  # (turns,) int64


# How the policies' rule reads on the device: shaders/mass.comp's SCORE_MODE.
SCORE_MODES = {"h2o": 1, "tova": 2}  # the rest: 0, decayed


def score_scale(cfg: ModelConfig) -> float:
    """A pass adds 1.0 of mass per query token, ring (FULL) layer and head: this makes it
    per token."""
    return 1.0 / (cfg.n_full * cfg.n_heads)


def update_scores(policy: RingPolicy, scores: np.ndarray, mass: np.ndarray, n: int,
                  k: int, scale: float) -> None:
    """Fold one pass's attention `mass` (n + k,) into the slots' `scores` (n + k,): n slots
    were live before the pass and k are new. `mass` is rescaled in place by `scale`."""
    np.multiply(mass, scale, out=mass)
    if policy.evict == "tova":
        np.multiply(mass, 1.0 / k, out=scores)  # mean over the pass's k queries
        return
    if policy.evict != "h2o":
        np.multiply(scores[:n], policy.salience_decay**k, out=scores[:n])
    scores[n:] = 0.0
    np.add(scores, mass, out=scores)


def choose_victims(policy: RingPolicy, scores: np.ndarray, k: int, victims: np.ndarray,
                   scratch: np.ndarray, ties: np.ndarray, rank: np.ndarray,
                   turns: TurnSpans | None = None, guarded: np.ndarray | None = None) -> None:
    """Set `victims` (m,) True for exactly k of the m candidates, oldest first in `scores`
    (m,). `scratch`, `ties` and `rank` are (m,) scratch arrays of f32, bool and int64.
    Only the `turns` policy reads `turns` (the recorded turns) and writes `guarded`, an (m,)
    f32 scratch for the scores with its protected slots raised to infinity."""
    if policy.evict == "window":
        victims[:k] = True
        victims[k:] = False
        return
    if policy.evict == "turns":  # short turns outrank every other slot
        _protect_short_turns(k, ties, turns, policy.short_turn_share, policy.short_turn)
        np.copyto(guarded, scores)
        guarded[ties] = np.inf
        scores = guarded
    # k-th smallest score without allocating: partition a scratch copy in place.
    np.copyto(scratch, scores)
    scratch.partition(k - 1)
    threshold = scratch[k - 1]
    np.less(scores, threshold, out=victims)
    # Ties at the threshold: take the oldest ones until exactly k are chosen.
    np.equal(scores, threshold, out=ties)
    np.cumsum(ties, out=rank)
    np.logical_and(ties, rank <= k - int(np.count_nonzero(victims)), out=ties)
    np.logical_or(victims, ties, out=victims)


def _protect_short_turns(k: int, keep_out: np.ndarray, turns: TurnSpans | None,
                         share: float, short: int) -> None:
    """Mark in `keep_out` (m,) the candidates of turns of at most `short` tokens, oldest turn
    first, while they fill at most `share` of the m - k that stay. Runs once per eviction
    batch, not per token: its temporaries are one entry per recorded turn."""
    m = keep_out.shape[0]
    keep_out[:] = False
    if turns is None:
        return
    bounds = [*turns.firsts.tolist(), m]
    room = int(share * (m - k))
    for lo, hi, tokens in zip(bounds[:-1], bounds[1:], turns.tokens.tolist()):
        if tokens <= short and 0 < hi - lo <= room:
            keep_out[lo:hi] = True
            room -= hi - lo
