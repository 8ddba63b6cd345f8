"""A rebase: the ring's live slots re-indexed to positions 0..n-1 when positions near the
model's context length (KVRing.reserve), each cached key rotated by its own shift.

RoPE composes, R(a) R(b) = R(a + b), so a key rotated to position p moves to p' by one more
rotation of p' - p: no pre-RoPE key is needed. The per-slot angles are float64, rounded once
into the arena's rebase_cos/rebase_sin, so every backend rotates by the same numbers; a ring
with a device (RingDevice: a GPU arena the CPU reaches slowly) rotates there. Window planes
(Gemma 3) shift as a whole by the newest slot's shift, keeping their tokens' distances.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..model.config import ModelConfig
from ..model.rope import Rope
from .arena import NEXT_POS, REBASES, ArenaViews

if TYPE_CHECKING:
    from .ring import KVRing


def rebase(ring: KVRing) -> None:
    """Re-index live slots to positions 0..n-1, rotating each cached key by its shift."""
    v = ring.arena.views().check()
    n = ring.n_active
    shift = v.tie_rank[:n]
    np.subtract(v.slot_index[:n], v.slot_pos[:n], out=shift)
    angle = v.rebase_angle[:n]
    np.copyto(angle, shift[:, None], casting="unsafe")
    np.multiply(angle, ring.rope.inv_freq, out=angle)
    cos, sin = v.rebase_cos[:n], v.rebase_sin[:n]
    np.cos(angle, out=cos[:, 0, :], casting="same_kind")
    np.sin(angle, out=sin[:, 0, :], casting="same_kind")
    if ring.device is not None:
        ring.device.rotate_keys(n)
    else:
        for layer in v.k_cache:
            rotate_keys(ring.cfg, v, layer[:n], ring.rope, cos, sin)
    if "kw_cache" in ring.planes:
        shift_window(ring, v, n - ring.next_pos)
    np.copyto(v.slot_pos[:n], v.slot_index[:n])
    v.ring_counters[NEXT_POS] = n
    v.ring_counters[REBASES] = ring.rebases + 1


def shift_window(ring: KVRing, v: ArenaViews, shift: int) -> None:
    """Move every window key by `shift` positions: the window keeps its tokens' distances
    to each other and to the tokens that follow, whatever the ring did to its own."""
    angle = v.rebase_angle[:1]
    np.multiply(ring.window_rope.inv_freq, float(shift), out=angle[0])
    cos, sin = v.rebase_cos[:1], v.rebase_sin[:1]
    np.cos(angle, out=cos[:, 0, :], casting="same_kind")
    np.sin(angle, out=sin[:, 0, :], casting="same_kind")
    if ring.device is not None:
        ring.device.rotate_window_keys()
        return
    for plane in v.kw_cache:
        rotate_keys(ring.cfg, v, plane, ring.window_rope, cos, sin)


def rotate_keys(cfg: ModelConfig, v: ArenaViews, keys: np.ndarray, rope: Rope,
                cos: np.ndarray, sin: np.ndarray) -> None:
    """Rotate cached key rows (rows, kv_dim) in place; f16 keys rotate in f32, rounded
    once after."""
    rows, kvh, hd = keys.shape[0], cfg.n_kv_heads, cfg.head_dim
    work = v.compact_staging[:rows] if keys.dtype != np.float32 else keys
    if work is not keys:
        np.copyto(work, keys)
    rope.rotate(work.reshape(rows, kvh, hd), cos, sin, v.rebase_a[:rows], v.rebase_b[:rows])
    if work is not keys:
        np.copyto(keys, work, casting="same_kind")
