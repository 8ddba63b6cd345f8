"""Which keys a WINDOW layer's queries may see: the masks every backend fills on the CPU.

A WINDOW layer keeps the newest `window` tokens in a circular plane, the token the ring's
clock stamped c in row (c - 1) % window (engine/state/arena.py's add_layer_planes); a query
stamped c sees the tokens stamped in (c - window, c]. `before` is the clock before the pass.
"""

from __future__ import annotations

import numpy as np


def window_mask(out: np.ndarray, before: int, window: int) -> None:
    """out (C, window + C) <- 0 where query j of a chunk that follows the token stamped
    `before` may see a column, -inf elsewhere. Columns are the plane's rows, then the
    chunk's own tokens; row r holds the token `age` steps older than `before`, where
    age = (before - 1 - r) mod window, and has never been written when age >= before."""
    C = out.shape[0]
    ages = (before - 1 - np.arange(window)) % window
    # Stamps relative to the chunk's first token; unwritten rows are put out of reach.
    stamps = np.concatenate([np.where(ages < before, -1 - ages, C + window), np.arange(C)])
    distance = np.arange(C)[:, None] - stamps[None, :]
    out[:] = np.where((distance >= 0) & (distance < window), 0.0, -np.inf)


def decode_window_mask(out: np.ndarray, before: int, window: int) -> None:
    """out (..., rows) <- 0 for the plane's first rows a decoded token sees once its own row
    is written, -inf for rows never written; allocates nothing (decode's budget). Until the
    plane is full its written rows are a prefix: `rows` may stop soon after them."""
    if before + 1 >= window:
        out[...] = 0.0
    else:  # rows 0..before hold the tokens stamped 1..before + 1
        out[..., : before + 1] = 0.0
        out[..., before + 1 :] = -np.inf
