"""Where each weight matrix goes: texel and block offsets within chunks that fit one texel view.

A texel view holds at most the device's maxTexelBufferElements texels (2^27 on an H200: 2 GiB
of RGBA32UI payload, 134M scale words), and an 8B model's payload alone is 230M texels at Q4_0,
so the matrices are packed, in the order the pass reads them, into chunks: each chunk is its
own payload buffer and scale buffer, each bound whole as one view, and a dispatch reads the
chunk of its matrix (passes.py binds that chunk's descriptor set). A model that fits one chunk
keeps today's single pair of buffers and offsets exactly.

A matrix never straddles two chunks. Only the token embedding and the output matrix may be
larger than a chunk on their own (a 128k vocabulary); they are cut into pieces of whole rows,
each dispatched on its own: embed.comp skips the tokens outside its piece, and the logits
product writes its rows at the piece's first row. A layer's matrix that exceeds a chunk alone
is refused in one line naming the tensor and the limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gguf import GGMLQuantizationType as QT

from ...align import align_up
from ...model.model import TensorInfo
from .encodings import ENCODINGS, SOURCES, encoding_of
from .loader import UnsupportedModelForVulkanError, UnsupportedTensorTypeForVulkanError

# The package's READ_TYPES declares the GGUF types SOURCES encodes to backend_problem, which
# refuses a model with any other type before upload (tests/test_iq_types.py holds the two to
# each other).
TYPE_NAMES = {code: e.name for code, e in ENCODINGS.items()}


@dataclass(frozen=True)
class Matrix:
    qtype: int  # its encoding (encodings.py; the ggml type code for those stored as is)
    rows: int
    cols: int
    texel: int  # first texel in its chunk's payload buffer
    block: int  # first scale word in its chunk's scale buffer
    chunk: int = 0  # which chunk's buffers hold it
    row0: int = 0  # a piece of token_embd/output: its first row in the whole matrix


@dataclass(frozen=True)
class Copy:
    """32-element blocks [first, first + count) of `tensor` go to `chunk` at (texel, scale
    word), in `encoding` (whole rows: a K-quant's 256-element blocks are never cut)."""

    tensor: str
    encoding: int
    chunk: int
    texel: int
    block: int
    first: int
    count: int
    # >0: the tensor's first `rotated` rows are heads of this width, stored with each
    # head's split-half RoPE pairs (i, i + width/2) as adjacent rows (2i, 2i + 1): the rows
    # the shaders rotate (a fused q|k|v's v rows stay as they are).
    interleave: int = 0
    rotated: int = 0
    # A gated query's attn_q (Qwen3.5) holds per head `gated` query rows, then as many gate
    # rows: part 1 copies the heads' query rows, part 2 their gate rows; 0 every row.
    gated: int = 0
    part: int = 0


class Planner:
    """Assigns chunks and offsets; remembers what to copy where."""

    def __init__(self, tensors: dict[str, TensorInfo], max_texels: int):
        self.tensors, self.cap = tensors, max_texels
        self.chunks: list[list[int]] = [[0, 0]]  # per chunk: [texels, scale words] used
        self.floats = 0
        self.copies: list[Copy] = []
        self.vectors: list[tuple[str, int]] = []  # (tensor, vec offset)

    def info(self, name: str) -> TensorInfo:
        t = self.tensors.get(name)
        if t is None:
            raise UnsupportedTensorTypeForVulkanError(f"model has no tensor {name!r}")
        if t.ggml_type not in SOURCES:
            try:
                kind = QT(t.ggml_type).name
            except ValueError:
                kind = f"ggml type {t.ggml_type}"
            raise UnsupportedTensorTypeForVulkanError(
                f"tensor {name} is {kind}; the Vulkan backend reads "
                f"{', '.join(QT(c).name for c in SOURCES)} (use --backend numpy)")
        return t

    def _infos(self, names: tuple[str, ...]) -> tuple[int, int, list[TensorInfo]]:
        infos = [self.info(n) for n in names]
        qtype, cols = encoding_of([i.ggml_type for i in infos]), infos[0].shape[0]
        if any(i.shape[0] != cols for i in infos):
            raise UnsupportedTensorTypeForVulkanError(
                f"tensors {', '.join(names)} differ in width; the Vulkan backend fuses them")
        if cols % (32 * ENCODINGS[qtype].group):  # K-quant files have whole super-blocks
            raise UnsupportedTensorTypeForVulkanError(
                f"tensor {names[0]} rows of {cols} are not whole "
                f"{32 * ENCODINGS[qtype].group}-element blocks")
        return qtype, cols, infos

    def _room(self, texels: int, words: int) -> bool:
        used_t, used_w = self.chunks[-1]
        return used_t + texels <= self.cap and used_w + words <= self.cap

    def matrix(self, *names: str, pieces: bool = False,
               interleave: dict[str, tuple[int, int]] | None = None,
               gated: tuple[str, int] | None = None) -> tuple[Matrix, ...]:
        """The matrix of `names` stacked by rows, whole in one chunk (a new one where the
        current chunk is full); with `pieces`, cut into runs of rows where it exceeds a chunk.
        `interleave`: tensor -> (head width, rows) of those whose RoPE pairs are split-half
        (Copy). `gated`: (tensor, head width) of a gated query's attn_q among `names`: its
        query rows stand in its place, its gate rows go last."""
        qtype, cols, infos = self._infos(names)
        enc, rows = ENCODINGS[qtype], sum(i.shape[1] for i in infos)
        parts = [(n, i, 1 if gated and n == gated[0] else 0) for n, i in zip(names, infos)]
        if gated:
            parts.append((gated[0], self.info(gated[0]), 2))
        blocks = rows * cols // 32
        texels, words = enc.payload_texels(blocks), enc.scale_words(blocks)
        if not self._room(texels, words) and self.chunks[-1] != [0, 0]:
            self.chunks.append([0, 0])
        if self._room(texels, words):
            chunk, (texel, block) = len(self.chunks) - 1, self.chunks[-1]
            m = Matrix(qtype, rows, cols, texel, block, chunk)
            for name, i, part in parts:
                n = i.shape[0] * i.shape[1] // (64 if part else 32)  # a part: half the rows
                width, rotated = (interleave or {}).get(name, (0, 0)) if part < 2 else (0, 0)
                self.copies.append(Copy(name, qtype, chunk, texel, block, 0, n, width, rotated,
                                        gated[1] if part else 0, part))
                texel, block = texel + enc.payload_texels(n), block + enc.scale_words(n)
            self.chunks[-1] = [texel, block]
            return (m,)
        if not pieces or len(names) > 1:
            raise UnsupportedModelForVulkanError(
                f"tensor {'+'.join(names)}: {texels} texels or {words} scale words exceed "
                f"this device's maxTexelBufferElements of {self.cap}")
        return self._pieces(names[0], qtype, rows, cols)

    def _pieces(self, name: str, qtype: int, rows: int, cols: int) -> tuple[Matrix, ...]:
        nb, enc = cols // 32, ENCODINGS[qtype]
        tpr, wpr = enc.payload_texels(nb), enc.scale_words(nb)  # texels, scale words a row
        if max(tpr, wpr) > self.cap:
            raise UnsupportedModelForVulkanError(
                f"tensor {name}: one row of {tpr} texels and {wpr} scale words "
                f"exceeds this device's maxTexelBufferElements of {self.cap}")
        out, row = [], 0
        while row < rows:
            texel, block = self.chunks[-1]
            fit = min((self.cap - texel) // tpr, (self.cap - block) // wpr, rows - row)
            if fit == 0:
                self.chunks.append([0, 0])
                continue
            chunk = len(self.chunks) - 1
            self.copies.append(Copy(name, qtype, chunk, texel, block, row * nb, fit * nb))
            out.append(Matrix(qtype, fit, cols, texel, block, chunk, row))
            self.chunks[-1] = [texel + fit * tpr, block + fit * wpr]
            row += fit
        return tuple(out)

    def vector(self, name: str, length: int) -> int:
        """The vec offset of the F32/F16 vector `name` (a norm's weights)."""
        return self.stacked([name], [length])

    def stacked(self, names: list[str], lengths: list[int]) -> int:
        """The vec offset of F32/F16 tensors `names` of `lengths` elements each, stored back to
        back (q|k|v biases; a conv's taps, row by row)."""
        off = self.table(sum(lengths))
        at = off
        for name, length in zip(names, lengths):
            t = self.info(name)
            if t.ggml_type not in (0, 1) or math.prod(t.shape) != length:
                raise UnsupportedTensorTypeForVulkanError(
                    f"vector {name} must be F32/F16 of {length}")
            self.vectors.append((name, at))
            at += length
        return off

    def table(self, length: int) -> int:
        off = self.floats
        self.floats += align_up(length, 16)  # 64-byte aligned starts
        return off
