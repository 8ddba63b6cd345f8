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

Scores are attention mass per layer and head in all of them, so a snapshot taken under one
policy restores into another: the scores carry over and the new policy's updates take over.
All of this runs on the arena's views and scratch, allocating nothing (decode's budget).
"""

from __future__ import annotations

import numpy as np

from ..model.config import RingPolicy


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
                   scratch: np.ndarray, ties: np.ndarray, rank: np.ndarray) -> None:
    """Set `victims` (m,) True for exactly k of the m candidates, oldest first in `scores`
    (m,). `scratch`, `ties` and `rank` are (m,) scratch arrays of f32, bool and int64."""
    if policy.evict == "window":
        victims[:k] = True
        victims[k:] = False
        return
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
