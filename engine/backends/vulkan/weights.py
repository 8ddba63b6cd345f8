"""The model's weights in device memory, still quantized, read straight from the GGUF.

Each matrix is stored as its 32-element GGUF blocks split in two: the block payload (quantized
codes, or raw floats) as RGBA32UI texels in `wq`, and the block's f16 scale(s) as one uint32
word in `ws`. Matrices that one dispatch reads together (q|k|v, gate|up) are stored back to
back, so they read as one taller matrix. Norm weights and the RoPE tables go to `vec` (f32).
The GGUF is memory-mapped only while uploading, so its pages leave RSS afterwards.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType

from ...align import align_up
from ...model.model import Model, TensorInfo
from .buffers import DeviceBuffer, device_buffer, staging_buffer
from .context import Context
from .loader import UnsupportedTensorTypeForVulkanError
from .upload import copy_buffers

# ggml type -> (bytes per 32-element block, texels per block, payload byte range, scale bytes).
# The codes equal shaders/common.glsl's QT_* constants.
ENCODINGS = {
    0: (128, 8, (0, 128), 0),  # F32
    1: (64, 4, (0, 64), 0),  # F16
    2: (18, 1, (2, 18), 2),  # Q4_0: f16 d, 16 bytes of nibbles
    3: (20, 1, (4, 20), 4),  # Q4_1: f16 d, f16 m, 16 bytes of nibbles
    8: (34, 2, (2, 34), 2),  # Q8_0: f16 d, 32 int8s
}
# The package's READ_TYPES declares these to backend_problem, which refuses a model with any
# other type before upload (tests/test_iq_types.py holds the two to each other).
TYPE_NAMES = {code: GGMLQuantizationType(code).name for code in ENCODINGS}


@dataclass(frozen=True)
class Matrix:
    qtype: int  # ggml type code
    rows: int
    cols: int
    texel: int  # first texel in wq
    block: int  # first scale word in ws


@dataclass(frozen=True)
class LayerMatrices:
    qkv: Matrix  # (q_dim + 2*kv_dim, d_model)
    wo: Matrix  # (d_model, q_dim)
    gate_up: Matrix  # (2*ffn_dim, d_model): gate rows, then up rows
    down: Matrix  # (d_model, ffn_dim)
    attn_norm: int  # vec offsets of the (d_model,) norm weights
    ffn_norm: int


@dataclass
class DeviceWeights:
    embed: Matrix
    output: Matrix  # the same matrix as embed when tied
    output_norm: int
    cos_off: int  # vec offset of the (context, head_dim/2) cos table
    sin_off: int
    layers: list[LayerMatrices]
    wq: DeviceBuffer  # [texels, 4] uint32: block payloads of every matrix
    ws: DeviceBuffer  # [blocks] uint32: block scale words
    vec: DeviceBuffer  # [floats] f32: norms, RoPE tables
    nbytes: int
    types: dict[str, str]  # tensor-group -> encoding name, for describe()


class _Planner:
    """Assigns texel and block offsets; remembers what to copy where."""

    def __init__(self, tensors: dict[str, TensorInfo]):
        self.tensors = tensors
        self.texels = self.blocks = self.floats = 0
        self.copies: list[tuple[str, int, int]] = []  # (tensor, first texel, first block)
        self.vectors: list[tuple[str, int]] = []  # (tensor, vec offset)

    def info(self, name: str) -> TensorInfo:
        t = self.tensors.get(name)
        if t is None:
            raise UnsupportedTensorTypeForVulkanError(f"model has no tensor {name!r}")
        if t.ggml_type not in ENCODINGS:
            try:
                kind = GGMLQuantizationType(t.ggml_type).name
            except ValueError:
                kind = f"ggml type {t.ggml_type}"
            raise UnsupportedTensorTypeForVulkanError(
                f"tensor {name} is {kind}; the Vulkan backend reads "
                f"{', '.join(TYPE_NAMES.values())} (use --backend numpy)")
        return t

    def matrix(self, *names: str) -> Matrix:
        infos = [self.info(n) for n in names]
        qtype, cols = infos[0].ggml_type, infos[0].shape[0]
        if any(i.ggml_type != qtype or i.shape[0] != cols for i in infos):
            raise UnsupportedTensorTypeForVulkanError(
                f"tensors {', '.join(names)} mix types or widths; the Vulkan backend fuses them")
        if cols % 32:
            raise UnsupportedTensorTypeForVulkanError(
                f"tensor {names[0]} rows of {cols} are not whole 32-element blocks")
        m = Matrix(qtype, sum(i.shape[1] for i in infos), cols, self.texels, self.blocks)
        for name, i in zip(names, infos):
            self.copies.append((name, self.texels, self.blocks))
            nblocks = i.shape[0] * i.shape[1] // 32
            self.texels += nblocks * ENCODINGS[qtype][1]
            self.blocks += nblocks
        return m

    def vector(self, name: str, length: int) -> int:
        t = self.info(name)
        if t.ggml_type not in (0, 1) or t.shape[0] != length:
            raise UnsupportedTensorTypeForVulkanError(f"norm {name} must be F32/F16 of {length}")
        return self.table(length, name)

    def table(self, length: int, name: str = "") -> int:
        off = self.floats
        if name:
            self.vectors.append((name, off))
        self.floats += align_up(length, 16)  # 64-byte aligned starts
        return off


def upload_weights(ctx: Context, model: Model) -> DeviceWeights:
    cfg, p = model.config, _Planner(model.tensors)
    embed = p.matrix("token_embd.weight")
    output = embed if cfg.tied_embeddings else p.matrix("output.weight")
    output_norm = p.vector("output_norm.weight", cfg.d_model)
    layers = []
    for i in range(cfg.n_layers):
        b = f"blk.{i}."
        layers.append(LayerMatrices(
            qkv=p.matrix(b + "attn_q.weight", b + "attn_k.weight", b + "attn_v.weight"),
            wo=p.matrix(b + "attn_output.weight"),
            gate_up=p.matrix(b + "ffn_gate.weight", b + "ffn_up.weight"),
            down=p.matrix(b + "ffn_down.weight"),
            attn_norm=p.vector(b + "attn_norm.weight", cfg.d_model),
            ffn_norm=p.vector(b + "ffn_norm.weight", cfg.d_model),
        ))
    rope_n = model.rope.cos.size
    cos_off, sin_off = p.table(rope_n), p.table(rope_n)

    sizes = {"wq": max(16, p.texels * 16), "ws": max(4, p.blocks * 4), "vec": 4 * p.floats}
    dest = {k: device_buffer(ctx, n, f"weights.{k}") for k, n in sizes.items()}
    staged = not all(b.host_visible for b in dest.values())
    src = {k: staging_buffer(ctx, n, f"staging.{k}") for k, n in sizes.items()} if staged else dest
    wq = src["wq"].array.view(np.uint32)
    ws = src["ws"].array.view(np.uint32)
    vec = src["vec"].array.view(np.float32)
    with open(model.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        raw = np.frombuffer(mm, np.uint8)
        for name, texel, block in p.copies:
            _copy_blocks(raw, model.tensors[name], wq, ws, texel, block)
        for name, off in p.vectors:
            t = model.tensors[name]
            dtype = np.float32 if t.ggml_type == 0 else np.float16
            vec[off : off + t.shape[0]] = raw[t.offset : t.offset + t.nbytes].view(dtype)
        del raw  # the mapping cannot close while a view of it is alive
    vec[cos_off : cos_off + rope_n] = model.rope.cos.ravel()
    vec[sin_off : sin_off + rope_n] = model.rope.sin.ravel()
    del wq, ws, vec
    if staged:
        copy_buffers(ctx, [(src[k], dest[k], sizes[k]) for k in sizes])
    types = {"embed": TYPE_NAMES[embed.qtype], "output": TYPE_NAMES[output.qtype],
             "layers": TYPE_NAMES[layers[0].qkv.qtype] if layers else "-"}
    return DeviceWeights(embed, output, output_norm, cos_off, sin_off, layers, dest["wq"],
                         dest["ws"], dest["vec"], sum(sizes.values()), types)


def _copy_blocks(raw: np.ndarray, t: TensorInfo, wq: np.ndarray, ws: np.ndarray,
                 texel: int, block: int) -> None:
    block_bytes, tpb, (lo, hi), scale_bytes = ENCODINGS[t.ggml_type]
    nblocks = t.nbytes // block_bytes
    blocks = raw[t.offset : t.offset + nblocks * block_bytes].reshape(nblocks, block_bytes)
    payload = wq[texel * 4 : (texel + nblocks * tpb) * 4].view(np.uint8)
    payload.reshape(nblocks, tpb * 16)[:] = blocks[:, lo:hi]
    scales = ws[block : block + nblocks]
    if scale_bytes == 4:
        scales[:] = blocks[:, 0:4].copy().view("<u4").ravel()
    elif scale_bytes == 2:
        scales[:] = blocks[:, 0:2].copy().view("<u2").ravel()
    else:
        scales[:] = 0
