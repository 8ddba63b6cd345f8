"""The model's weights in device memory, still quantized, read straight from the GGUF.

Each matrix is stored as 32-element blocks split in two: the block payload (quantized codes,
or raw floats) as RGBA32UI texels in `wq`, and the block's scale(s) as one or two uint32 words
in `ws`: the GGUF's own blocks where the shaders read its type, else a lossless re-encoding
(encodings.py: Q5_x and the K-quants). Matrices that one dispatch reads together (q|k|v,
gate|up) are stored back to back, so they read as one taller matrix. Where the payload or the
scales exceed one texel view (maxTexelBufferElements), the matrices are packed into several
chunks, each its own `wq`/`ws` pair (chunks.py). Norm weights go to `vec` (f32); RoPE's
cos/sin rows come with each pass (resources.set_step). The GGUF is memory-mapped only while
uploading, so its pages leave RSS afterwards.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass

import gguf.quants
import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT

from ...model.architecture import CONV, DELTA, FULL, SPLIT_HALF
from ...model.config import ModelConfig
from ...model.model import Model, TensorInfo
from .buffers import DeviceBuffer, device_buffer, staging_buffer
from .chunks import TYPE_NAMES, Copy, Matrix, Planner
from .context import Context
from .direct_encodings import encode_blocks
from .encodings import ENCODINGS, SOURCES, STORED, stored_as_is
from .upload import copy_buffers

RECODE_BLOCKS = 1 << 18  # 32-element blocks re-encoded at a time (a multiple of 8)


@dataclass(frozen=True)
class LayerMatrices:
    # The token mixer's products: attention's q|k|v (and a gated query's gates, Qwen3.5) and
    # output; a CONV layer's in_proj (3*d_model, d_model: B, C and x rows) and out_proj
    # (d_model, d_model); a DELTA layer's q|k|v projection (conv_dim rows) and ssm_out.
    qkv: Matrix  # (q_dim + 2*kv_dim [+ q_dim of gates], d_model)
    wo: Matrix  # (d_model, q_dim)
    gate_up: Matrix  # (2*ffn_dim, d_model): gate rows, then up rows
    down: Matrix  # (d_model, ffn_dim)
    attn_norm: int  # vec offsets of the (d_model,) norm weights
    ffn_norm: int
    qkv_bias: int = 0  # vec offset of the (q_dim + 2*kv_dim,) q|k|v bias (qwen2), if any
    qk_norm: int = 0  # vec offset of the (head_dim,) q then k QK-norm weights (qwen3), if any
    kind: str = FULL  # the layer's state kind (layer_kinds.py)
    conv_taps: int = 0  # CONV, DELTA: vec offset of the (channels, conv_kernel) taps
    # DELTA: the output gate z (inner, d_model), beta then alpha rows (2*v_heads, d_model), and
    # the vec offset of dt (v_heads), a (v_heads), then the gated norm's weights (head).
    delta_z: Matrix | None = None
    delta_ba: Matrix | None = None
    delta_vec: int = 0
    # Post-norms (Gemma): vec offsets of the (d_model,) norms of the attention output and of
    # the feed-forward output, applied before each residual add; 0 where the model has none.
    post_attn_norm: int = 0
    post_ffn_norm: int = 0


@dataclass
class DeviceWeights:
    embed: tuple[Matrix, ...]  # pieces of whole rows, in order: one unless it exceeds a chunk
    output: tuple[Matrix, ...]  # the same pieces as embed when tied
    output_norm: int
    layers: list[LayerMatrices]
    wq: list[DeviceBuffer]  # per chunk, [texels, 4] uint32: block payloads of its matrices
    ws: list[DeviceBuffer]  # per chunk, [blocks] uint32: block scale words
    vec: DeviceBuffer  # [floats] f32: norms, biases, conv taps
    nbytes: int
    encodings: dict[str, str]  # tensor-group -> the encoding the shaders read, for describe()
    types: dict[str, int]  # GGUF tensor type name -> tensors of it, as ggml's describe()


def upload_weights(ctx: Context, model: Model) -> DeviceWeights:
    cfg = model.config
    p = Planner(model.tensors, ctx.limits.max_texel_elements)
    embed = p.matrix("token_embd.weight", pieces=True)
    output = embed if cfg.tied_embeddings else None
    output_norm = p.vector(f"{cfg.arch.output_norm}.weight", cfg.d_model)
    layers = []
    arch = cfg.arch
    for i, kind in enumerate(cfg.kinds):
        b = f"blk.{i}."
        mixer = _mixer(p, cfg, b, kind)
        gate_up = [b + "ffn_up.weight"] if arch.fused_gate_up else [
            b + "ffn_gate.weight", b + "ffn_up.weight"]
        if arch.post_norms:
            mixer.update(post_attn_norm=p.vector(b + "post_attention_norm.weight", cfg.d_model),
                         post_ffn_norm=p.vector(b + "post_ffw_norm.weight", cfg.d_model))
        layers.append(LayerMatrices(
            gate_up=p.matrix(*gate_up)[0],
            down=p.matrix(b + "ffn_down.weight")[0],
            attn_norm=p.vector(b + "attn_norm.weight", cfg.d_model),
            ffn_norm=p.vector(f"{b}{arch.ffn_norm}.weight", cfg.d_model), kind=kind,
            **mixer))
    if output is None:  # after the layers: the pass reads it last, as the chunks are packed
        output = p.matrix("output.weight", pieces=True)
    wq = [device_buffer(ctx, max(16, t * 16), f"weights.wq{c}") for c, (t, _) in
          enumerate(p.chunks)]
    ws = [device_buffer(ctx, max(4, b * 4), f"weights.ws{c}") for c, (_, b) in
          enumerate(p.chunks)]
    vec = device_buffer(ctx, 4 * p.floats, "weights.vec")
    with open(model.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        raw = np.frombuffer(mm, np.uint8)
        for c in range(len(p.chunks)):  # one chunk's staging at a time bounds host memory
            _fill(ctx, [wq[c], ws[c]], _blocks_writer(
                raw, model, [cp for cp in p.copies if cp.chunk == c]))
        _fill(ctx, [vec], _vector_writer(raw, model, p.vectors))
        del raw  # the mapping cannot close while a view of it is alive
    encodings = {"embed": TYPE_NAMES[embed[0].qtype], "output": TYPE_NAMES[output[0].qtype],
                 "layers": TYPE_NAMES[layers[0].qkv.qtype] if layers else "-"}
    types: dict[str, int] = {}
    for t in model.tensors.values():
        name = QT(t.ggml_type).name
        types[name] = types.get(name, 0) + 1
    nbytes = sum(b.size for b in (*wq, *ws, vec))
    return DeviceWeights(embed, output, output_norm, layers, wq, ws, vec, nbytes, encodings,
                         types)


def _mixer(p: Planner, cfg: ModelConfig, b: str, kind: str) -> dict:
    """The LayerMatrices fields of the token mixer of a layer of `kind` (blk prefix `b`)."""
    arch = cfg.arch
    if kind == CONV:
        return dict(
            qkv=p.matrix(b + "shortconv.in_proj.weight")[0],
            wo=p.matrix(b + "shortconv.out_proj.weight")[0],
            conv_taps=p.vector(b + "shortconv.conv.weight", cfg.d_model * cfg.conv_kernel))
    if kind == DELTA:
        nv, hd = cfg.delta_v_heads, cfg.delta_head_dim
        return dict(
            qkv=p.matrix(b + "attn_qkv.weight")[0],
            delta_z=p.matrix(b + "attn_gate.weight")[0],
            delta_ba=p.matrix(b + "ssm_beta.weight", b + "ssm_alpha.weight")[0],
            wo=p.matrix(b + "ssm_out.weight")[0],
            conv_taps=p.vector(b + "ssm_conv1d.weight",
                               cfg.delta_conv_dim * cfg.conv_kernel),
            delta_vec=p.stacked([b + "ssm_dt.bias", b + "ssm_a", b + "ssm_norm.weight"],
                                [nv, nv, hd]))
    # Attention (FULL or WINDOW). Fused q|k|v and gate|up (phi3) are one tensor each, in the
    # order the pass reads.
    qkv = [b + "attn_qkv.weight"] if arch.fused_qkv else [
        b + "attn_q.weight", b + "attn_k.weight", b + "attn_v.weight"]
    # Split-half RoPE: Q/K rows interleaved per head, as matmul_common.glsl rotates them.
    rotated = [cfg.q_dim + cfg.kv_dim] if arch.fused_qkv else [cfg.q_dim, cfg.kv_dim]
    interleave = {n: (cfg.head_dim, rows) for n, rows in zip(qkv, rotated)} \
        if arch.rope_style == SPLIT_HALF else {}
    bias = [b + "attn_q.bias", b + "attn_k.bias", b + "attn_v.bias"]
    gated = (qkv[0], cfg.head_dim) if arch.gated_query else None
    return dict(
        qkv=p.matrix(*qkv, interleave=interleave, gated=gated)[0],
        wo=p.matrix(b + "attn_output.weight")[0],
        qkv_bias=p.stacked(bias, [cfg.q_dim, cfg.kv_dim, cfg.kv_dim]) if arch.qkv_bias else 0,
        qk_norm=p.stacked([b + "attn_q_norm.weight", b + "attn_k_norm.weight"],
                          [cfg.head_dim] * 2) if arch.qk_norm else 0)


def _blocks_writer(raw: np.ndarray, model: Model, copies: list[Copy]):
    def write(wq: np.ndarray, ws: np.ndarray) -> None:
        for cp in copies:
            _copy_blocks(raw, model.tensors[cp.tensor], wq, ws, cp)

    return write


def _vector_writer(raw: np.ndarray, model: Model, vectors: list[tuple[str, int]]):
    """Fills vec: the norm (and bias, taps) vectors `vectors` from the GGUF."""

    def write(words: np.ndarray) -> None:
        v = words.view(np.float32)
        for name, off in vectors:
            t = model.tensors[name]
            dtype = np.float32 if t.ggml_type == 0 else np.float16
            values = raw[t.offset : t.offset + t.nbytes].view(dtype)
            v[off : off + values.size] = values

    return write


def _fill(ctx: Context, dest: list[DeviceBuffer], write) -> None:
    """write(*views) fills uint32 views of `dest`: the buffers' own mappings where they are
    host-visible, else staging buffers that are then copied on the device (and freed)."""
    staged = not all(b.host_visible for b in dest)
    src = [staging_buffer(ctx, b.size, "staging." + b.label) for b in dest] if staged else dest
    views = [b.array.view(np.uint32) for b in src]
    write(*views)
    del views
    if staged:
        copy_buffers(ctx, [(s, d, d.size) for s, d in zip(src, dest)])


def _copy_blocks(raw: np.ndarray, t: TensorInfo, wq: np.ndarray, ws: np.ndarray,
                 cp: Copy) -> None:
    elements, block_bytes = GGML_QUANT_SIZES[QT(t.ggml_type)]
    if elements == 1:  # F32, F16: read in blocks of 32 as the others
        elements, block_bytes = 32, 32 * block_bytes
    per = elements // 32  # 32-element blocks per GGUF block: 1, or a K-quant's 8
    start = t.offset + cp.first // per * block_bytes
    count = cp.count // per
    if cp.part:  # one half of every head's rows: the queries' (1) or the gates' (2)
        nb = t.shape[0] // 32 // per
        heads = raw[start : start + 2 * count * block_bytes].reshape(-1, 2, cp.gated, nb,
                                                                      block_bytes)
        blocks = heads[:, cp.part - 1].reshape(count, block_bytes)
    else:
        blocks = raw[start : start + count * block_bytes].reshape(count, block_bytes)
    if cp.interleave:  # whole tensor: row 2i of each head from row i, 2i + 1 from i + width/2
        nb, width = t.shape[0] // 32 // per, cp.interleave
        rows = count // nb
        src = np.arange(rows)
        i = src[: cp.rotated] % width
        src[: cp.rotated] += i // 2 + (i % 2) * (width // 2) - i
        blocks = blocks.reshape(rows, nb, block_bytes)[src].reshape(count, block_bytes)
    enc = ENCODINGS[cp.encoding]  # rows of payload and scales: one per group of blocks
    payload = wq[cp.texel * 4 : (cp.texel + enc.payload_texels(cp.count)) * 4].view(np.uint8)
    payload = payload.reshape(-1, enc.texels * 16)
    scales = ws[cp.block : cp.block + enc.scale_words(cp.count)].reshape(-1, enc.words)
    if cp.encoding == SOURCES[QT.F32] and t.ggml_type != QT.F32:  # a mix (encoding_of)
        values = gguf.quants.dequantize(blocks.reshape(-1), QT(t.ggml_type))
        payload[:] = values.astype(np.float32).view(np.uint8).reshape(payload.shape)
        scales[:] = 0
        return
    if stored_as_is(t.ggml_type, cp.encoding):  # a group is a block
        (lo, hi), scale_bytes = STORED[t.ggml_type]
        payload[:] = blocks[:, lo:hi]
        if scale_bytes == 4:
            scales[:] = blocks[:, 0:4].copy().view("<u4")
        elif scale_bytes == 2:
            scales[:] = blocks[:, 0:2].copy().view("<u2")
        else:
            scales[:] = 0
        return
    step = RECODE_BLOCKS // per  # GGUF blocks at a time: bounds the temporaries
    for at in range(0, count, step):
        part = blocks[at : at + step]
        groups = slice(at * per // enc.group, (at + len(part)) * per // enc.group)
        payload[groups], scales[groups] = encode_blocks(part, t.ggml_type, cp.encoding)
