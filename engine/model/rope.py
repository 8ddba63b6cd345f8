"""Rotary position embedding in GGUF's interleaved layout.

llama.cpp's converter permutes the Q and K rows of llama models so that RoPE rotates adjacent
pairs (x[2i], x[2i+1]) rather than HF's split halves. We keep the GGUF layout, so keys in the
ring are bit-compatible with what a backend reading GGUF blocks directly computes.

Rotations compose: R(a) R(b) = R(a + b). That is what lets a rebase move a cached key from
position p to p' by rotating it by p' - p, without the pre-RoPE key.
"""

from __future__ import annotations

import numpy as np

from .config import ModelConfig


def inv_frequencies(cfg: ModelConfig) -> np.ndarray:
    """theta^(-2i/d) for i < d/2, in float64 so that large positions keep their precision."""
    half = cfg.head_dim // 2
    return 1.0 / (cfg.rope_theta ** (np.arange(half, dtype=np.float64) * 2.0 / cfg.head_dim))


class RopeTables:
    """cos/sin for every position of the model's context, shared by all conversations."""

    def __init__(self, cfg: ModelConfig):
        self.inv_freq = inv_frequencies(cfg)  # (half,) float64
        positions = np.arange(cfg.context_length, dtype=np.float64)
        angles = np.multiply.outer(positions, self.inv_freq)  # transient f64 (ctx, half)
        # Generated straight into the final float32 tables; no f32 or f64 twin is kept.
        self.cos = np.cos(angles, out=np.empty(angles.shape, np.float32), casting="same_kind")
        self.sin = np.sin(angles, out=np.empty(angles.shape, np.float32), casting="same_kind")
        del angles


def rotate_pairs(x: np.ndarray, cos: np.ndarray, sin: np.ndarray,
                 tmp_a: np.ndarray, tmp_b: np.ndarray) -> None:
    """Rotate x's interleaved pairs in place.

    x: (..., heads, head_dim) float32 view; cos, sin broadcastable to (..., heads, head_dim/2);
    tmp_a, tmp_b: scratch shaped like (..., heads, head_dim/2).
    """
    even = x[..., 0::2]
    odd = x[..., 1::2]
    np.multiply(even, cos, out=tmp_a)
    np.multiply(odd, sin, out=tmp_b)
    np.subtract(tmp_a, tmp_b, out=tmp_a)  # new even
    np.multiply(even, sin, out=tmp_b)
    np.multiply(odd, cos, out=odd)
    np.add(odd, tmp_b, out=odd)  # new odd
    np.copyto(even, tmp_a)
