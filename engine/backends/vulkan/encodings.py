"""The weight encodings the shaders read, and the lossless re-encoding of the GGUF block types
they do not read as stored (Q5_0, Q5_1, Q3_K, Q4_K, Q5_K, Q6_K) into them, at upload time.

Every encoding stores a matrix as 32-element blocks: `texels` RGBA32UI payload texels in WQ
and `words` R32UI scale words in WS per `group` blocks (shaders/common.glsl's QT_* codes,
block_texel and scale_words). F32, F16, Q4_0, Q4_1 and Q8_0 are stored as their GGUF blocks
(payload bytes as they are, the f16 scale(s) as the one word). The other types are rewritten
through one exact form: each 32-element block as int8 codes c with

    value_i = d * s_h * c_i + dmin * o      (s_h: s0 for elements 0-15, s1 for 16-31)

d and dmin f16 and s0, s1, o small integers, which is what each type's dequantizer computes
(gguf-py's, the numpy backend's reference, and ggml's): Q4_K/Q5_K d*sc*q - dmin*m (o = -m),
Q6_K d*sc*(q - 32) and Q3_K d*(sc - 32)*q with a scale per 16 elements, Q5_0 d*(q - 16),
Q5_1 d*q + m. Each
product d * s * c and dmin * o is exact in f32 (11 + 8 + 8 bits), so a shader that reads
these fields multiplies by exactly gguf-py's numbers. The form is written out as:

- Q8_0's own encoding where it fits (s = 1, o = 0: Q5_0): int8 codes, the f16 d.
- Q8M (Q5_1; fused 32-weight types of which one has an offset): int8 codes, half2(d, m).
- K4 (Q4_K): per 256-element super-block (8 blocks, where the K-quants keep d and dmin) its
  blocks' 4-bit codes in Q4_1's nibble order, a texel each; and 5 words: half2(d, dmin), then
  the int8 pairs (s, o) of its blocks, two a word.
- K5 (Q5_K): K4's nibble texels and words, then 2 texels of the codes' 5th bits (a word a
  block: bit i for element i).
- K6 (Q6_K): the low 4 bits of q = c + 32 as K4's nibbles, then 4 texels of q's top 2 bits
  (two words a block: elements 0-15, then 16-31, 2 bits each); K4's words with (s0, s1) pairs.
- K6X (Q3_K; fused K-quants of different encodings, e.g. a Q4_K_M file's Q4_K q|k with its
  Q6_K v): K6's payload of q = c + 32 (every K-quant's codes fit 6 bits so); per super-block
  9 words: half2(d, dmin), then one word a block holding the int8s (s0, s1, o).

Costs in bits per weight, against the GGUF's own: Q5_0 8.5 (5.5), Q5_1 9 (6), Q4_K 4.625
(4.5), Q5_K 5.625 (5.5), Q6_K 6.625 (6.5625), Q3_K 7.125 (3.4375); a mixed fused matrix 7.125.
Decode reads every weight byte once a token, so the K-quants keep their own packing but for
the scales (bytes, not 6-bit fields) and Q4_1's nibble order. Q2_K is not read: its
16-element sub-blocks each have their own min, which this form (one o a block) lacks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType as QT


@dataclass(frozen=True)
class Encoding:
    name: str
    texels: int  # RGBA32UI payload texels per `group` blocks
    words: int  # R32UI scale words per `group` blocks
    group: int = 1  # 8: a K-quant's super-block, whose d and dmin its blocks share

    def payload_texels(self, blocks: int) -> int:
        """Payload texels of `blocks` blocks (whole groups: rows of a K-quant are)."""
        return blocks // self.group * self.texels

    def scale_words(self, blocks: int) -> int:
        return blocks // self.group * self.words


# Codes equal shaders/common.glsl's QT_*: ggml's for the types stored as they are.
Q8M, K4, K6X, K5, K6 = 64, 65, 66, 67, 68
ENCODINGS: dict[int, Encoding] = {
    0: Encoding("F32", 8, 1),  # the word is unused (zero): every block has one
    1: Encoding("F16", 4, 1),
    2: Encoding("Q4_0", 1, 1),  # f16 d
    3: Encoding("Q4_1", 1, 1),  # half2(d, m)
    8: Encoding("Q8_0", 2, 1),  # f16 d
    Q8M: Encoding("Q8M", 2, 1),  # half2(d, m)
    K4: Encoding("K4", 8, 5, 8),
    K5: Encoding("K5", 10, 5, 8),
    K6: Encoding("K6", 12, 5, 8),
    K6X: Encoding("K6X", 12, 9, 8),
}
# GGUF type -> its encoding when a matrix is of that type alone.
SOURCES: dict[int, int] = {QT.F32: 0, QT.F16: 1, QT.Q4_0: 2, QT.Q4_1: 3, QT.Q8_0: 8,
                           QT.Q5_0: 8, QT.Q5_1: Q8M, QT.Q3_K: K6X, QT.Q4_K: K4, QT.Q5_K: K5,
                           QT.Q6_K: K6}
K_QUANTS = frozenset({QT.Q3_K, QT.Q4_K, QT.Q5_K, QT.Q6_K})
# Stored as their GGUF blocks: (payload byte range of a block, scale bytes).
STORED: dict[int, tuple[tuple[int, int], int]] = {
    QT.F32: ((0, 128), 0), QT.F16: ((0, 64), 0), QT.Q4_0: ((2, 18), 2),
    QT.Q4_1: ((4, 20), 4), QT.Q8_0: ((2, 34), 2)}


def encoding_of(types: list[int]) -> int:
    """The encoding of a matrix whose stacked parts are of these GGUF types: their own where
    they agree; where not, K6X for K-quants, Q8_0 or Q8M for 32-weight types (Q8M where one
    has an offset). Floats beside a quantized type, or a K-quant beside a 32-weight type,
    have no common quantized form (no common d): such a matrix is stored dequantized, as F32
    (exact: gguf-py's values; weights.py). Real files mix so only in small matrices, such as
    Qwen3.5's ssm_beta | ssm_alpha."""
    kinds = set(types)
    codes = {SOURCES[t] for t in kinds}
    if len(codes) == 1:
        return codes.pop()
    if kinds <= K_QUANTS:
        return K6X
    if kinds & (K_QUANTS | {QT.F32, QT.F16}):
        return SOURCES[QT.F32]
    return Q8M if kinds & {QT.Q4_1, QT.Q5_1} else 8


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


def _none(blocks: np.ndarray) -> np.ndarray:
    """No dmin: zero f16 bits for each block."""
    return np.zeros(len(blocks), np.uint16)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(n, 16) bytes of a 32-element block (element j low, j + 16 high) -> (n, 32) codes."""
    return np.concatenate([qs & 15, qs >> 4], axis=1)


def _high_bits(qh: np.ndarray) -> np.ndarray:
    """(n, 4) bytes, bit i the 5th bit of element i -> (n, 32) of 0/16."""
    return (np.unpackbits(qh, axis=1, bitorder="little") << 4).astype(np.uint8)


def k_scales(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K's 12 bytes of 6-bit (scale, min) pairs -> (n, 8) each (ggml's
    get_scale_min_k4)."""
    d, m, md = scales[:, 0:4], scales[:, 4:8], scales[:, 8:12]
    sc = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=1)
    mn = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=1)
    return sc, mn


def _minus(q: np.ndarray, zero: int) -> np.ndarray:
    """Unsigned codes q < 2 * zero as the int8s q - zero (uint8 arithmetic wraps to them)."""
    return (q - np.uint8(zero)).view(np.int8)


def _form(codes, d, dmin, s, o, per: int) -> Form:
    """Form of n super-blocks of `per` 32-element blocks: fields per super-block repeated."""
    n = len(d) * per
    ones = np.ones((n, 2), np.int8)
    return Form(codes.astype(np.int8, copy=False).reshape(n, 32), np.repeat(d, per),
                np.repeat(dmin, per), ones if s is None else s.astype(np.int8).reshape(n, 2),
                np.zeros(n, np.int8) if o is None else o.astype(np.int8).reshape(n))


def _q4_0(b):
    return _form(_minus(_nibbles(b[:, 2:18]), 8), _f16(b, 0), _none(b), None, None, 1)


def _q4_1(b):
    return _form(_nibbles(b[:, 4:20]), _f16(b, 0), _f16(b, 2), None, np.ones(len(b)), 1)


def _q8_0(b):
    return _form(b[:, 2:34].view(np.int8), _f16(b, 0), _none(b), None, None, 1)


def _q5_0(b):
    q = _nibbles(b[:, 6:22]) | _high_bits(b[:, 2:6])
    return _form(_minus(q, 16), _f16(b, 0), _none(b), None, None, 1)


def _q5_1(b):
    q = _nibbles(b[:, 8:24]) | _high_bits(b[:, 4:8])
    return _form(q, _f16(b, 0), _f16(b, 2), None, np.ones(len(b)), 1)


def _k_low(qs: np.ndarray) -> np.ndarray:
    """Q4_K/Q5_K's 128 bytes -> (n, 8, 32) low 4 bits: sub-block 2k from the low nibbles of
    bytes 32k..32k+31, 2k + 1 from their high nibbles."""
    q = qs.reshape(-1, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    return (q & 15).reshape(-1, 8, 32)


def _q4_k(b):
    sc, mn = k_scales(b[:, 4:16])
    s = np.repeat(sc, 2, axis=1)  # one scale for both halves of a sub-block
    return _form(_k_low(b[:, 16:144]), _f16(b, 0), _f16(b, 2), s, -mn.astype(np.int16), 8)


def _q5_k(b):
    sc, mn = k_scales(b[:, 4:16])
    high = (b[:, 16:48].reshape(-1, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1
    q = _k_low(b[:, 48:176]) | (high << 4)
    return _form(q, _f16(b, 0), _f16(b, 2), np.repeat(sc, 2, axis=1), -mn.astype(np.int16), 8)


def _q6_k(b):
    # As gguf-py's Q6_K.dequantize_blocks: 4 low bits from ql, 2 high bits from qh.
    ql = b[:, 0:128].reshape(-1, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    ql = (ql & 15).reshape(-1, 8, 32)
    qh = b[:, 128:192].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    qh = (qh & 3).reshape(-1, 8, 32)
    q = _minus(ql | (qh << 4), 32)
    return _form(q, _f16(b, 208), _none(b), b[:, 192:208].view(np.int8), None, 8)


def _q3_k(b):
    # As gguf-py's Q3_K.dequantize_blocks: d * (sc - 32) * q, q = 2 low bits - 4 where the
    # hmask bit is clear, a 6-bit scale per 16 elements.
    lo = b[:, 96:104].reshape(-1, 1, 8) >> np.array([0, 4], np.uint8).reshape(1, 2, 1)
    hi = b[:, 104:108].reshape(-1, 1, 4) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 4, 1)
    sc = _minus((lo.reshape(-1, 16) & 15) | ((hi.reshape(-1, 16) & 3) << 4), 32)
    ql = b[:, 32:96].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    qh = b[:, 0:32].reshape(-1, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)
    q = (ql.reshape(-1, 8, 32) & 3).view(np.int8) - (((qh & 1) ^ 1) << 2).view(np.int8)
    return _form(q, _f16(b, 108), _none(b), sc, None, 8)


FORMS = {QT.Q4_0: _q4_0, QT.Q4_1: _q4_1, QT.Q8_0: _q8_0, QT.Q5_0: _q5_0, QT.Q5_1: _q5_1,
         QT.Q3_K: _q3_k, QT.Q4_K: _q4_k, QT.Q5_K: _q5_k, QT.Q6_K: _q6_k}


def form_of(blocks: np.ndarray, ggml_type: int) -> Form:
    """(n, block bytes) uint8 GGUF blocks -> their 32-element blocks in the exact form."""
    return FORMS[QT(ggml_type)](blocks)


def encode(f: Form, encoding: int) -> tuple[np.ndarray, np.ndarray]:
    """A Form of n blocks as the payload bytes and scale words of `encoding`, one row per
    group of blocks: (n / group, texels * 16) and (n / group, words)."""
    n = len(f.d)
    if encoding in (8, Q8M):
        plain = (f.s == 1).all() and ((f.o == 0) | ((f.o == 1) & (encoding == Q8M))).all()
        if not plain:
            raise ValueError(f"blocks with sub-scales or this offset do not fit "
                             f"{ENCODINGS[encoding].name}")
        m = np.where(f.o == 1, f.dmin, 0).astype(np.uint32)  # dmin * 1, or no offset
        return f.codes.view(np.uint8), (f.d.astype(np.uint32) | (m << 16)).reshape(n, 1)
    if encoding not in (K4, K5, K6, K6X):
        raise ValueError(f"encoding {encoding} is not a re-encoding")
    head = (f.d.astype(np.uint32) | (f.dmin.astype(np.uint32) << 16)).reshape(-1, 8)
    if (head != head[:, :1]).any():
        raise ValueError("blocks of one super-block differ in d or dmin")
    s = f.s.view(np.uint8).astype(np.uint32)
    o = f.o.view(np.uint8).astype(np.uint32)
    bias = np.int8(32 if encoding in (K6, K6X) else 0)  # 6-bit codes c stored as q = c + 32
    q = (f.codes + bias).view(np.uint8)
    if encoding == K6X:  # one word a block: s0, s1, o
        ok, words = True, np.concatenate(
            [head[:, :1], (s[:, 0] | (s[:, 1] << 8) | (o << 16)).reshape(-1, 8)], axis=1)
    else:  # pairs two a word: K4, K5's (s, o), K6's (s0, s1)
        if encoding == K6:
            ok, pair = (f.o == 0).all(), s[:, 0] | (s[:, 1] << 8)
        else:
            ok, pair = (s[:, 0] == s[:, 1]).all(), s[:, 0] | (o << 8)
        pair = pair.reshape(-1, 4, 2)  # blocks 2i, 2i + 1 in word i
        words = np.concatenate([head[:, :1], pair[:, :, 0] | (pair[:, :, 1] << 16)], axis=1)
    if not ok or (q >= 1 << {K4: 4, K5: 5}.get(encoding, 6)).any():
        raise ValueError(f"these codes or scales do not fit {ENCODINGS[encoding].name}")
    nibbles = (q[:, :16] & 15) | ((q[:, 16:] & 15) << 4)  # Q4_1's order
    if encoding == K4:
        return nibbles.reshape(-1, 128), words
    high = q >> 4
    if encoding == K5:  # a word a block, bit i element i's 5th bit
        plane = np.packbits(high, axis=1, bitorder="little")
    else:  # two words a block, 2 bits an element (little-endian: 4 elements a byte)
        h = high.reshape(n, 8, 4)
        plane = h[:, :, 0] | (h[:, :, 1] << 2) | (h[:, :, 2] << 4) | (h[:, :, 3] << 6)
    # A super-block's payload: its 8 blocks' nibble texels, then their high bits.
    return np.concatenate([nibbles.reshape(-1, 128), plane.reshape(n // 8, -1)], axis=1), words
