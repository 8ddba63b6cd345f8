"""Eviction's compaction: the surviving slots move down over the evicted ones, in order.

The ring keeps its live slots compact and in ingest order (ring.py), so after the eviction
policy picks its victims, every kept slot's keys, values and metadata move down to close the
gaps. The moves go through the arena's `compact_staging` scratch, so eviction allocates
nothing.
"""

from __future__ import annotations

import math

import numpy as np

from .kv_format import stored_by_dimension


def compact_slots(v, keep: np.ndarray, first: int, n: int) -> int:
    """Move the slots of [first, n) that `keep` (n - first bools) marks to [first, kept),
    in order: K/V planes of every ring layer, clocks, positions and salience. Returns kept;
    the caller clears what is left past it."""
    kept = first + int(np.count_nonzero(keep))
    for cache in (v.k_cache, v.v_cache):
        # A plane kept by dimension is compacted along its stored slot axis, so that both
        # copies run over contiguous memory (its by-slot view would move strided elements).
        by_dimension = stored_by_dimension(cache)
        planes = cache.swapaxes(1, 2) if by_dimension else cache  # (L, kv_dim, S) / (L, S, kv_dim)
        axis = 1 if by_dimension else 0  # each layer's slot axis
        shape = list(planes.shape[1:])
        shape[axis] = kept - first
        # The staging rows are f32-sized, so they hold rows of either element type.
        staging = v.compact_staging.reshape(-1).view(cache.dtype)[: math.prod(shape)]
        staging = staging.reshape(shape)
        live, moved = [slice(None)] * 2, [slice(None)] * 2
        live[axis], moved[axis] = slice(first, n), slice(first, kept)
        for layer in planes:
            np.compress(keep, layer[tuple(live)], axis=axis, out=staging)
            layer[tuple(moved)] = staging
    for meta in (v.slot_clock, v.slot_pos, v.slot_salience):
        staging = v.compact_staging.reshape(-1).view(meta.dtype)[: kept - first]
        np.compress(keep, meta[first:n], out=staging)
        meta[first:kept] = staging
    return kept
