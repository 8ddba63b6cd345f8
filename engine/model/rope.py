"""Rotary position embedding, in the rotation layout the model's architecture uses.

llama.cpp's converter permutes the Q and K rows of llama models so that RoPE rotates adjacent
pairs (x[2i], x[2i+1]) ("interleaved"); qwen2, qwen3 and phi3 GGUFs keep HF's layout, which
rotates x[i] with x[i + d/2] ("split_half"). We keep each GGUF's layout, so keys in the ring are
bit-compatible with what a backend reading GGUF blocks directly computes.

Partial rotary (Qwen3.5) rotates only the first `rotary_dim` dims of each head, split-half
within them: pair i is (x[i], x[i + rotary_dim/2]). The cos/sin rows keep head_dim/2 columns so
every caller's shapes stay the same; the pairs past rotary_dim/2 get frequency 0 and are never
touched.

Rotations compose: R(a) R(b) = R(a + b). That is what lets a rebase move a cached key from
position p to p' by rotating it by p' - p, without the pre-RoPE key. Scaling (linear, or Llama 3's
per-frequency factors) only changes the frequencies, so it composes the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

import numpy as np

from .architecture import INTERLEAVED
from .config import ModelConfig

Rotate = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], None]


def window_rope_config(cfg: ModelConfig) -> ModelConfig:
    """The RoPE of WINDOW layers: their own base where the model has one (Gemma 3's local
    10,000 against its global 1,000,000), never the global layers' scaling."""
    return replace(cfg, rope_theta=cfg.rope_theta_window or cfg.rope_theta,
                   rope_freq_scale=1.0, rope_freq_factors=())


def inv_frequencies(cfg: ModelConfig) -> np.ndarray:
    """Radians per position of each rotated pair, (head_dim/2,) float64 so that large
    positions keep their precision: theta^(-2i/d), times the linear scale, over the factors."""
    half, rotated = cfg.head_dim // 2, cfg.rotary_dim // 2
    inv = np.zeros(half, dtype=np.float64)
    inv[:rotated] = 1.0 / (cfg.rope_theta ** (np.arange(rotated, dtype=np.float64) * 2.0 /
                                              cfg.rotary_dim))
    inv *= cfg.rope_freq_scale
    if cfg.rope_freq_factors:
        inv /= np.asarray(cfg.rope_freq_factors, dtype=np.float64)
    return inv


class Rope:
    """The rotation of the model's positions: its frequencies, the rotation that matches the
    model's layout, and cos/sin rows computed for the positions a pass needs. Tabling the
    whole context instead would cost context * head_dim floats whether used or not (Qwen3.5's
    262,144 positions: 268 MB of host memory, and as much again on a GPU)."""

    def __init__(self, cfg: ModelConfig):
        self.inv_freq = inv_frequencies(cfg)  # (half,) float64
        self.rotate: Rotate = rotate_pairs if cfg.arch.rope_style == INTERLEAVED else rotate_halves
        if cfg.rotary_dim < cfg.head_dim:
            self.rotate = partial(rotate_leading_halves, pairs=cfg.rotary_dim // 2)
        self._steps = np.zeros((0, 1))  # (n, 1) float64 0..n-1, grown to the largest pass

    def fill_rows(self, pos: int, cos: np.ndarray, sin: np.ndarray, positions: np.ndarray,
                  angle: np.ndarray) -> None:
        """cos, sin: (count, half) float32 rows of positions pos .. pos + count - 1, as angles
        in float64 (exact integer positions times the frequencies) rounded once, so every
        backend and every pass gets the same numbers. positions (count, 1) and angle
        (count, half) are float64 scratch: a ready conversation's passes allocate nothing."""
        count, steps = cos.shape[0], self._steps  # one read: conversations share this Rope
        if steps.shape[0] < count:  # once per larger pass size, at its first use
            steps = self._steps = np.arange(count, dtype=np.float64)[:, None]
        np.add(steps[:count], float(pos), out=positions)
        np.multiply(positions, self.inv_freq, out=angle)
        np.cos(angle, out=cos, casting="same_kind")
        np.sin(angle, out=sin, casting="same_kind")


def _rotate(first: np.ndarray, second: np.ndarray, cos: np.ndarray, sin: np.ndarray,
            tmp_a: np.ndarray, tmp_b: np.ndarray) -> None:
    np.multiply(first, cos, out=tmp_a)
    np.multiply(second, sin, out=tmp_b)
    np.subtract(tmp_a, tmp_b, out=tmp_a)  # new first
    np.multiply(first, sin, out=tmp_b)
    np.multiply(second, cos, out=second)
    np.add(second, tmp_b, out=second)  # new second
    np.copyto(first, tmp_a)


def rotate_pairs(x: np.ndarray, cos: np.ndarray, sin: np.ndarray,
                 tmp_a: np.ndarray, tmp_b: np.ndarray) -> None:
    """Rotate x's interleaved pairs (x[2i], x[2i+1]) in place.

    x: (..., heads, head_dim) float32 view; cos, sin broadcastable to (..., heads, head_dim/2);
    tmp_a, tmp_b: scratch shaped like (..., heads, head_dim/2).
    """
    _rotate(x[..., 0::2], x[..., 1::2], cos, sin, tmp_a, tmp_b)


def rotate_halves(x: np.ndarray, cos: np.ndarray, sin: np.ndarray,
                  tmp_a: np.ndarray, tmp_b: np.ndarray) -> None:
    """Rotate x's split-half pairs (x[i], x[i + head_dim/2]) in place; arguments as above."""
    half = x.shape[-1] // 2
    _rotate(x[..., :half], x[..., half:], cos, sin, tmp_a, tmp_b)


def rotate_leading_halves(x: np.ndarray, cos: np.ndarray, sin: np.ndarray,
                          tmp_a: np.ndarray, tmp_b: np.ndarray, *, pairs: int) -> None:
    """Partial rotary: rotate (x[i], x[i + pairs]) for i < pairs in place; the dims from
    2 * pairs on pass through. Arguments as above; only their first `pairs` columns are read."""
    _rotate(x[..., :pairs], x[..., pairs : 2 * pairs], cos[..., :pairs], sin[..., :pairs],
            tmp_a[..., :pairs], tmp_b[..., :pairs])
