"""Attention of WINDOW layers (Gemma 3's sliding-window layers) in the numpy forward pass.

A WINDOW layer's keys and values never enter the ring: they sit in the arena's circular
planes `kw_cache`/`vw_cache` (one per WINDOW layer, `window` rows), the token the ring's
clock stamped c in row (c - 1) % window (engine/state/arena.py's add_layer_planes). A query
stamped c attends to the tokens stamped in (c - window, c], itself included, as HF's and
llama.cpp's sliding-window masks do. None of it adds to the ring's attention mass, which
is what salience is made of: the window forgets by age alone.

Decode writes the new token's row first, then attends over the valid rows (their order does
not matter to a softmax). A prefill chunk's queries must see the window as it was before the
chunk overwrites it, so a chunk attends over the plane's old rows (masked by their age) and
its own new keys (causal, windowed), and only then writes its newest rows into the plane.
"""

from __future__ import annotations

import numpy as np

from ...model.config import ModelConfig
from ...state.arena import ArenaViews
from .softmax import exp_rows, softmax_few_rows


def store_window_rows(plane: np.ndarray, rows: np.ndarray, before: int) -> None:
    """Write the rows (C, kv_dim) of the tokens stamped before + 1 ... into their circular
    rows of `plane` (window, kv_dim); only the newest `window` of them can be kept."""
    W, C = plane.shape[0], rows.shape[0]
    first = max(0, C - W)
    at = (before + first) % W
    head = min(C - first, W - at)
    plane[at : at + head] = rows[first : first + head]
    plane[: C - first - head] = rows[first + head :]


def prefill_window_attention(v: ArenaViews, cfg: ModelConfig, q_scale: float, plane: int,
                             C: int, before: int) -> None:
    """The chunk's C queries (v.p_qkv) over WINDOW plane `plane` and the chunk's own keys
    into v.p_attn, with v.p_wmask[:C] from window_mask; then the chunk's rows are stored."""
    G, hd, W, qd, kvd = cfg.group_size, cfg.head_dim, cfg.window, cfg.q_dim, cfg.kv_dim
    N = W + C
    keys, values = v.p_wk[:N], v.p_wv[:N]
    np.copyto(keys[:W], v.kw_cache[plane])
    np.copyto(values[:W], v.vw_cache[plane])
    np.copyto(keys[W:], v.p_qkv[:C, qd : qd + kvd])
    np.copyto(values[W:], v.p_qkv[:C, qd + kvd : qd + 2 * kvd])
    mask = v.p_wmask[: C * N].reshape(C, 1, N)
    q3 = v.p_q[: C * G].reshape(C, G, hd)
    scores = v.p_scores[: C * G * N].reshape(C * G, N)
    attn = v.p_attn[:C].reshape(C, cfg.n_heads, hd)
    for g in range(cfg.n_kv_heads):
        cols = slice(g * hd, (g + 1) * hd)
        np.multiply(v.p_qkv[:C, g * G * hd : (g + 1) * G * hd].reshape(C, G, hd), q_scale,
                    out=q3)
        np.matmul(v.p_q[: C * G], keys[:, cols].T, out=scores)
        np.add(scores.reshape(C, G, N), mask, out=scores.reshape(C, G, N))
        inv_sum = v.p_row_sum[: C * G]
        exp_rows(scores, v.p_row_max[: C * G], inv_sum)
        out = v.p_o[: C * G]
        np.matmul(scores, values[:, cols], out=out)
        np.multiply(out, inv_sum[:, None], out=out)
        attn[:, g * G : (g + 1) * G, :] = out.reshape(C, G, hd)
    store_window_rows(v.kw_cache[plane], keys[W:], before)
    store_window_rows(v.vw_cache[plane], values[W:], before)


def decode_window_attention(v: ArenaViews, cfg: ModelConfig, q_scale: float, plane: int,
                            clock: int) -> None:
    """The token stamped `clock` (its q, k, v in v.qkv): store its row, then its query heads
    over the window's valid rows into v.attn."""
    H, KVH, G, hd, W = cfg.n_heads, cfg.n_kv_heads, cfg.group_size, cfg.head_dim, cfg.window
    qd, kvd = cfg.q_dim, cfg.kv_dim
    row = (clock - 1) % W
    v.kw_cache[plane, row] = v.qkv[qd : qd + kvd]
    v.vw_cache[plane, row] = v.qkv[qd + kvd : qd + 2 * kvd]
    N = min(clock, W)
    q = v.qkv[:qd]
    np.multiply(q, q_scale, out=q)
    scores = v.scores[: H * N].reshape(KVH, G, N)
    keys = v.kw_cache[plane, :N].reshape(N, KVH, hd).transpose(1, 2, 0)  # (KVH, hd, N)
    np.matmul(q.reshape(KVH, G, hd), keys, out=scores)
    softmax_few_rows(scores.reshape(H, N), v.row_max, v.row_sum)
    values = v.vw_cache[plane, :N].reshape(N, KVH, hd).transpose(1, 0, 2)  # (KVH, N, hd)
    np.matmul(scores, values, out=v.attn.reshape(KVH, G, hd))
