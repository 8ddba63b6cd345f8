"""The weight encodings the shaders read, and the lossless re-encoding of the GGUF block types
they do not read as stored (Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) into them, at upload time.

Every encoding stores a matrix as 32-element blocks: `texels` RGBA32UI payload texels in WQ
and `words` R32UI scale words in WS per block (shaders/common.glsl's QT_* codes). F32, F16,
Q4_0, Q4_1 and Q8_0 are stored as their GGUF blocks (payload bytes as they are, the f16
scale(s) as the one word). The other types are rewritten block by block through one exact
form: each 32-element block as int8 codes c with

    value_i = d * s_h * c_i + dmin * o      (s_h: s0 for elements 0-15, s1 for 16-31)

d and dmin f16 and s0, s1, o small integers, which is what each type's dequantizer computes
(gguf-py's, the numpy backend's reference, and ggml's): Q4_K/Q5_K d*sc*q - dmin*m (o = -m),
Q6_K d*sc*(q - 32) with a scale per 16 elements, Q5_0 d*(q - 16), Q5_1 d*q + m. Each
product d * s * c and dmin * o is exact in f32 (11 + 8 + 8 bits), so a shader that reads
these fields multiplies by exactly gguf-py's numbers. The form is written out as:

- Q8_0's own encoding where it fits (s = 1, o = 0: Q5_0): int8 codes and the f16 d.
- K4 (Q4_K): 4-bit codes in Q4_1's nibble order, and two words: half2(d, dmin) and the int8s
  (s0, s1, o).
- K8 (Q5_1, Q5_K, Q6_K, and fused matrices whose parts mix quantized types, e.g. a Q4_K_M
  file's Q4_K q|k with its Q6_K v): int8 codes and K4's two words.

Costs in bits per weight, against the GGUF's own: Q5_0 8.5 (5.5), Q5_1 10 (6), Q4_K 6 (4.5),
Q5_K 10 (5.5), Q6_K 10 (6.5625). Decode reads every weight byte once a token, so a native
super-block layout would be faster; these trade bytes for one simple decode path per kind
that is exact by construction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType as QT


@dataclass(frozen=True)
class Encoding:
    name: str
    texels: int  # RGBA32UI payload texels per 32-element block
    words: int  # R32UI scale words per block


# Codes equal shaders/common.glsl's QT_*: ggml's for the types stored as they are.
K4, K8 = 64, 65
ENCODINGS: dict[int, Encoding] = {
    0: Encoding("F32", 8, 1),  # the word is unused (zero): every block has one
    1: Encoding("F16", 4, 1),
    2: Encoding("Q4_0", 1, 1),  # f16 d
    3: Encoding("Q4_1", 1, 1),  # half2(d, m)
    8: Encoding("Q8_0", 2, 1),  # f16 d
    K4: Encoding("K4", 1, 2),
    K8: Encoding("K8", 2, 2),
}
# GGUF type -> its encoding when a matrix is of that type alone.
SOURCES: dict[int, int] = {QT.F32: 0, QT.F16: 1, QT.Q4_0: 2, QT.Q4_1: 3, QT.Q8_0: 8,
                           QT.Q5_0: 8, QT.Q5_1: K8, QT.Q4_K: K4, QT.Q5_K: K8, QT.Q6_K: K8}
# Stored as their GGUF blocks: (payload byte range of a block, scale bytes).
STORED: dict[int, tuple[tuple[int, int], int]] = {
    QT.F32: ((0, 128), 0), QT.F16: ((0, 64), 0), QT.Q4_0: ((2, 18), 2),
    QT.Q4_1: ((4, 20), 4), QT.Q8_0: ((2, 34), 2)}


def encoding_of(types: list[int]) -> int | None:
    """The encoding of a matrix whose stacked parts are of these GGUF types: their own where
    they agree, K8 where they are quantized types of different encodings, else None."""
    codes = {SOURCES[t] for t in types}
    if len(codes) == 1:
        return codes.pop()
    return K8 if not {QT.F32, QT.F16} & set(types) else None


def stored_as_is(ggml_type: int, encoding: int) -> bool:
    return ggml_type in STORED and SOURCES[ggml_type] == encoding


@dataclass
class Form:
    """n 32-element blocks in the exact form above."""

    codes: np.ndarray  # (n, 32) int8
    d: np.ndarray  # (n,) uint16: f16 bits
    dmin: np.ndarray  # (n,) uint16: f16 bits
    s: np.ndarray  # (n, 2) int8: s0, s1
    o: np.ndarray  # (n,) int8


def _f16(blocks: np.ndarray, at: int) -> np.ndarray:
    return blocks[:, at : at + 2].copy().view("<u2").ravel()


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(n, 16) bytes of a 32-element block (element j low, j + 16 high) -> (n, 32) codes."""
    return np.concatenate([qs & 15, qs >> 4], axis=1)


def _high_bits(qh: np.ndarray) -> np.ndarray:
    """(n, 4) bytes, bit i the 5th bit of element i -> (n, 32) of 0/16."""
    return (np.unpackbits(qh, axis=1, bitorder="little") << 4).astype(np.uint8)


def _k_scales(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K's 12 bytes of 6-bit (scale, min) pairs -> (n, 8) each (ggml's
    get_scale_min_k4)."""
    d, m, md = scales[:, 0:4], scales[:, 4:8], scales[:, 8:12]
    sc = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=1)
    mn = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=1)
    return sc, mn


def _form(codes, d, dmin, s, o, per: int) -> Form:
    """Form of n super-blocks of `per` 32-element blocks: fields per super-block repeated."""
    n = len(d) * per
    ones = np.ones((n, 2), np.int8)
    return Form(codes.astype(np.int8).reshape(n, 32), np.repeat(d, per),
                np.repeat(dmin, per), ones if s is None else s.astype(np.int8).reshape(n, 2),
                np.zeros(n, np.int8) if o is None else o.astype(np.int8).reshape(n))


def _q4_0(b):
    return _form(_nibbles(b[:, 2:18]).astype(np.int16) - 8, _f16(b, 0), _f16(b, 0) * 0,
                 None, None, 1)


def _q4_1(b):
    return _form(_nibbles(b[:, 4:20]), _f16(b, 0), _f16(b, 2), None, np.ones(len(b)), 1)


def _q8_0(b):
    return _form(b[:, 2:34].view(np.int8), _f16(b, 0), _f16(b, 0) * 0, None, None, 1)


def _q5_0(b):
    q = _nibbles(b[:, 6:22]) | _high_bits(b[:, 2:6])
    return _form(q.astype(np.int16) - 16, _f16(b, 0), _f16(b, 0) * 0, None, None, 1)


def _q5_1(b):
    q = _nibbles(b[:, 8:24]) | _high_bits(b[:, 4:8])
    return _form(q, _f16(b, 0), _f16(b, 2), None, np.ones(len(b)), 1)


def _k_low(qs: np.ndarray) -> np.ndarray:
    """Q4_K/Q5_K's 128 bytes -> (n, 8, 32) low 4 bits: sub-block 2k from the low nibbles of
    bytes 32k..32k+31, 2k + 1 from their high nibbles."""
    q = qs.reshape(-1, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    return (q & 15).reshape(-1, 8, 32)


def _q4_k(b):
    sc, mn = _k_scales(b[:, 4:16])
    s = np.repeat(sc, 2, axis=1)  # one scale for both halves of a sub-block
    return _form(_k_low(b[:, 16:144]), _f16(b, 0), _f16(b, 2), s, -mn.astype(np.int16), 8)


def _q5_k(b):
    sc, mn = _k_scales(b[:, 4:16])
    high = (b[:, 16:48].reshape(-1, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1
    q = _k_low(b[:, 48:176]) | (high << 4)
    return _form(q, _f16(b, 0), _f16(b, 2), np.repeat(sc, 2, axis=1), -mn.astype(np.int16), 8)


def _q6_k(b):
    # As gguf-py's Q6_K.dequantize_blocks: 4 low bits from ql, 2 high bits from qh.
    ql = b[:, 0:128].reshape(-1, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    ql = (ql & 15).reshape(-1, 8, 32)
    qh = b[:, 128:192].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    qh = (qh & 3).reshape(-1, 8, 32)
    q = (ql | (qh << 4)).astype(np.int16) - 32
    return _form(q, _f16(b, 208), _f16(b, 208) * 0, b[:, 192:208].view(np.int8), None, 8)


FORMS = {QT.Q4_0: _q4_0, QT.Q4_1: _q4_1, QT.Q8_0: _q8_0, QT.Q5_0: _q5_0, QT.Q5_1: _q5_1,
         QT.Q4_K: _q4_k, QT.Q5_K: _q5_k, QT.Q6_K: _q6_k}


def form_of(blocks: np.ndarray, ggml_type: int) -> Form:
    """(n, block bytes) uint8 GGUF blocks -> their 32-element blocks in the exact form."""
    return FORMS[QT(ggml_type)](blocks)


def encode(f: Form, encoding: int) -> tuple[np.ndarray, np.ndarray]:
    """A Form as (n, texels * 16) payload bytes and (n, words) scale words of `encoding`."""
    n = len(f.d)
    if encoding == 8:  # Q8_0: only a form without sub-scales or offset fits
        if (f.s != 1).any() or (f.o != 0).any():
            raise ValueError("blocks with sub-scales or an offset do not fit Q8_0")
        return f.codes.view(np.uint8), f.d.astype(np.uint32).reshape(n, 1)
    words = np.empty((n, 2), np.uint32)
    words[:, 0] = f.d.astype(np.uint32) | (f.dmin.astype(np.uint32) << 16)
    s = f.s.view(np.uint8).astype(np.uint32)
    words[:, 1] = s[:, 0] | (s[:, 1] << 8) | (f.o.view(np.uint8).astype(np.uint32) << 16)
    if encoding == K8:
        return f.codes.view(np.uint8), words
    if encoding == K4:
        q = f.codes.view(np.uint8)
        if (q > 15).any():
            raise ValueError("codes past 4 bits do not fit K4")
        return q[:, :16] | (q[:, 16:] << 4), words
    raise ValueError(f"encoding {encoding} is not a re-encoding")

