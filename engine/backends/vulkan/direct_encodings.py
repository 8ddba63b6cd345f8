"""Byte-to-byte re-encodings of the two K-quant types a Q4_K_M file is mostly made of: Q4_K
as K4 and Q6_K as K6 (encodings.py describes both forms).

Going through encodings.Form (a code a byte, then packed again) ran at ~55 MB/s on one core,
which made re-encoding the slowest step of loading an 8B Q4_K_M model on a GPU (about 30 s on
the H200's host). These give the same bytes (tests/test_vulkan_kquant.py holds them equal on
every code and scale pattern) at ~550 MB/s (Q4_K) and ~170 MB/s (Q6_K).
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as QT

from .encodings import K4, K6, encode, form_of, k_scales


def encode_blocks(blocks: np.ndarray, ggml_type: int,
                  encoding: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, block bytes) GGUF blocks as `encoding`'s payload bytes and scale words (encode's
    rows): by a byte path below where there is one, else through the Form."""
    if ggml_type == QT.Q4_K and encoding == K4:
        return _q4_k_as_k4(blocks)
    if ggml_type == QT.Q6_K and encoding == K6:
        return _q6_k_as_k6(blocks)
    return encode(form_of(blocks, ggml_type), encoding)


def _q4_k_as_k4(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What encode(form_of(b, Q4_K), K4) gives (a test holds them equal), without the Form:
    Q4_K's codes are K4's, so only their nibble order and the scale bytes change."""
    n = len(b)
    # Q4_K: sub-blocks 2k and 2k + 1 in the low and high nibbles of bytes 32k..32k+31;
    # K4 (Q4_1's order): byte j of a block holds its elements j (low) and j + 16 (high).
    qs = b[:, 16:144].reshape(n, 4, 2, 16)  # (super-block, pair k, bytes 0-15 | 16-31, j)
    first, second = qs[:, :, 0], qs[:, :, 1]
    low_block = (first & 15) | (second << 4)
    high_block = (first >> 4) | (second & 0xF0)
    payload = np.stack([low_block, high_block], axis=2).reshape(n, 128)
    sc, mn = k_scales(b[:, 4:16])  # (n, 8) uint8 each, < 64
    pair = sc.astype(np.uint32) | ((-mn.view(np.int8)).view(np.uint8).astype(np.uint32) << 8)
    head = b[:, 0:4].copy().view("<u4")  # half2(d, dmin), as stored
    return payload, np.concatenate([head, pair[:, 0::2] | (pair[:, 1::2] << 16)], axis=1)


def _q6_k_as_k6(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What encode(form_of(b, Q6_K), K6) gives, without the Form: K6 stores Q6_K's own
    unsigned q (c + 32), its low 4 bits in Q4_1's nibble order, then its top 2 bits."""
    n = len(b)
    ql = b[:, 0:128].reshape(n, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    qh = b[:, 128:192].reshape(n, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(
        1, 1, 4, 1)
    low = (ql & 15).reshape(n, 8, 2, 16)  # (super-block, block, elements 0-15 | 16-31, j)
    nibbles = low[:, :, 0] | (low[:, :, 1] << 4)  # (n, 8, 16)
    high = (qh & 3).reshape(n, 8, 8, 4)  # 2 bits an element, 4 elements a byte
    plane = high[..., 0] | (high[..., 1] << 2) | (high[..., 2] << 4) | (high[..., 3] << 6)
    scales = b[:, 192:208].astype(np.uint32)  # int8 (s0, s1) of each block, as bytes
    pair = scales[:, 0::2] | (scales[:, 1::2] << 8)  # (n, 8): a block's (s0, s1)
    d = b[:, 208:210].copy().view("<u2").astype(np.uint32)  # dmin 0
    words = np.concatenate([d, pair[:, 0::2] | (pair[:, 1::2] << 16)], axis=1)
    return np.concatenate([nibbles.reshape(n, 128), plane.reshape(n, 64)], axis=1), words
