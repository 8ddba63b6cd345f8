"""The immutable f32 weight image: built once per GGUF, then memory-mapped read-only.

Dequantizing 135M parameters takes seconds and parsing a GGUF's 49k-entry vocabulary with
gguf-py takes several more, so both happen once, on first use, and the result is cached as one
file keyed by the GGUF's content fingerprint. Every later start maps that file and builds views:
weights are offset views into one mapping, as in llama2.c.

Image file layout (little-endian):
    0   magic      4s   b"CHWI"
    4   version    u32  IMAGE_VERSION
    8   meta_len   u64  length of the UTF-8 JSON metadata that follows the preamble
    16  data_off   u64  offset of the tensor data (page aligned)
    24  data_len   u64  bytes of tensor data
    32  metadata   JSON {fingerprint, config, tensors: {name: [offset, shape]}}
    data_off       f32 tensors, each at a 64-byte aligned offset relative to data_off
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, quants

from ..align import align_up
from ..errors import ModelError, WeightImageError
from ..fileio import atomic_output
from .architecture import CONV, DELTA
from .config import ModelConfig
from .gguf_file import ModelFile
from .image_sources import arranged, image_sources

IMAGE_MAGIC = b"CHWI"
IMAGE_VERSION = 2
PREAMBLE = struct.Struct("<4sIQQQ")
PAGE = 4096
TENSOR_ALIGN = 64

Progress = Callable[[int, int], None]  # (done_bytes, total_bytes)


@dataclass(frozen=True)
class LayerWeights:
    attn_norm: np.ndarray  # (d_model,) the norm before the operator (attention or conv)
    ffn_norm: np.ndarray  # (d_model,)
    w_gate_up: np.ndarray  # (2*ffn_dim, d_model): gate rows then up rows
    w_down: np.ndarray  # (d_model, ffn_dim)
    # Attention layers (FULL, WINDOW):
    wqkv: np.ndarray | None = None  # (q_dim + 2*kv_dim, d_model): q, k, v rows, one matmul
    wo: np.ndarray | None = None  # (d_model, q_dim)
    # CONV layers (LFM2's short convolution):
    conv_in: np.ndarray | None = None  # (3*d_model, d_model): B rows, C rows, x rows
    conv_weight: np.ndarray | None = None  # (d_model, conv_kernel): channel c's taps, oldest first
    conv_out: np.ndarray | None = None  # (d_model, d_model)
    bqkv: np.ndarray | None = None  # (q_dim + 2*kv_dim,) when the architecture has QKV bias
    q_norm: np.ndarray | None = None  # (head_dim,) per-head RMSNorm weights (QK-norm)
    k_norm: np.ndarray | None = None  # (head_dim,)
    post_attn_norm: np.ndarray | None = None  # (d_model,) where the architecture has post-norms
    post_ffn_norm: np.ndarray | None = None  # (d_model,)
    # DELTA layers (Qwen3.5's gated delta net, model/delta_net.py), value heads in the GGUF's
    # (tiled) order:
    delta_in: np.ndarray | None = None  # (conv_dim + inner + 2*v_heads, d): qkv, z, beta, alpha
    delta_conv: np.ndarray | None = None  # (conv_dim, conv_kernel): channel c's taps, oldest first
    delta_dt: np.ndarray | None = None  # (v_heads,) added to alpha before softplus
    delta_a: np.ndarray | None = None  # (v_heads,) -exp(A_log): the decay's rate
    delta_norm: np.ndarray | None = None  # (head,) the gated RMSNorm's weight
    delta_out: np.ndarray | None = None  # (d, inner)


@dataclass(frozen=True)
class Weights:
    token_embd: np.ndarray  # (vocab, d_model)
    output: np.ndarray  # (vocab, d_model); the same array as token_embd when tied
    output_norm: np.ndarray  # (d_model,)
    layers: tuple[LayerWeights, ...]
    nbytes: int


def image_plan(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of the image and its shape, in file order."""
    d, f = cfg.d_model, cfg.ffn_dim
    plan: dict[str, tuple[int, ...]] = {"token_embd": (cfg.vocab_size, d)}
    if not cfg.tied_embeddings:
        plan["output"] = (cfg.vocab_size, d)
    plan["output_norm"] = (d,)
    for i, kind in enumerate(cfg.kinds):
        plan[f"blk.{i}.attn_norm"] = (d,)
        if kind == DELTA:
            v_heads, inner, conv = cfg.delta_v_heads, cfg.delta_inner, cfg.delta_conv_dim
            plan[f"blk.{i}.delta_in"] = (conv + inner + 2 * v_heads, d)
            plan[f"blk.{i}.delta_conv"] = (conv, cfg.conv_kernel)
            plan[f"blk.{i}.delta_dt"] = (v_heads,)
            plan[f"blk.{i}.delta_a"] = (v_heads,)
            plan[f"blk.{i}.delta_norm"] = (cfg.delta_head_dim,)
            plan[f"blk.{i}.delta_out"] = (d, inner)
        elif kind == CONV:
            plan[f"blk.{i}.conv_in"] = (3 * d, d)
            plan[f"blk.{i}.conv_weight"] = (d, cfg.conv_kernel)
            plan[f"blk.{i}.conv_out"] = (d, d)
        else:
            plan[f"blk.{i}.wqkv"] = (cfg.qkv_dim, d)
            plan[f"blk.{i}.wo"] = (d, cfg.q_dim)
        plan[f"blk.{i}.ffn_norm"] = (d,)
        plan[f"blk.{i}.w_gate_up"] = (2 * f, d)
        plan[f"blk.{i}.w_down"] = (d, f)
        if cfg.arch.qkv_bias and kind not in (CONV, DELTA):
            plan[f"blk.{i}.bqkv"] = (cfg.qkv_dim,)
        if cfg.arch.qk_norm and kind not in (CONV, DELTA):
            plan[f"blk.{i}.q_norm"] = (cfg.head_dim,)
            plan[f"blk.{i}.k_norm"] = (cfg.head_dim,)
        if cfg.arch.post_norms:  # named as in the GGUF
            plan[f"blk.{i}.post_attention_norm"] = (d,)
            plan[f"blk.{i}.post_ffw_norm"] = (d,)
    return plan


def _dequantize(model: ModelFile, name: str) -> np.ndarray:
    t = model.tensor(name)
    if t.tensor_type == GGMLQuantizationType.F32:
        out = np.asarray(t.data, dtype=np.float32)
    elif t.tensor_type == GGMLQuantizationType.F16:
        out = np.asarray(t.data).astype(np.float32)
    else:
        out = quants.dequantize(t.data, t.tensor_type)
    # GGUF shapes list the fastest dimension first; ndarray shapes are the reverse.
    return np.asarray(out, dtype=np.float32).reshape(tuple(int(x) for x in reversed(t.shape)))


def build_image(model: ModelFile, dest: Path, progress: Progress | None = None) -> None:
    """Dequantize `model` into an image at `dest`, atomically (tmp file, fsync, rename)."""
    cfg = model.config
    plan = image_plan(cfg)
    table: dict[str, list] = {}
    cursor = 0
    for name, shape in plan.items():
        table[name] = [cursor, list(shape)]
        nbytes = 4 * int(np.prod(shape))
        cursor += align_up(nbytes, TENSOR_ALIGN)
    data_len = cursor
    meta = json.dumps(
        {
            "fingerprint": model.fingerprint,
            "config": asdict(cfg),
            "tensors": table,
        }
    ).encode()
    data_off = align_up(PREAMBLE.size + len(meta), PAGE)
    total = data_off + data_len

    with atomic_output(dest, "w+b") as f:
        f.truncate(total)
        f.write(PREAMBLE.pack(IMAGE_MAGIC, IMAGE_VERSION, len(meta), data_off, data_len))
        f.write(meta)
        with mmap.mmap(f.fileno(), total) as m:
            done = 0
            for name, shape in plan.items():
                offset = data_off + table[name][0]
                out = np.frombuffer(m, np.float32, int(np.prod(shape)), offset).reshape(shape)
                parts = arranged(cfg, name, [_dequantize(model, src)
                                             for src in image_sources(cfg, name)])
                stacked_shape = (sum(p.shape[0] for p in parts), *parts[0].shape[1:])
                if stacked_shape != shape:
                    raise ModelError(
                        f"tensor {name} has shape {stacked_shape}, expected {shape}: "
                        f"{model.path}"
                    )
                np.concatenate(parts, axis=0, out=out)
                del out, parts
                done += 4 * int(np.prod(shape))
                if progress:
                    progress(done, data_len)
            m.flush()


@dataclass
class WeightImage:
    """A mapped image: the weights as read-only views into one mapping."""

    path: Path
    config: ModelConfig
    weights: Weights
    # Kept for the image's lifetime; numpy views hold it too, so it unmaps when the last goes.
    _mapping: mmap.mmap

    @property
    def mapping(self) -> mmap.mmap:
        """The mapping the weights are views of (watched for truncation: model_files.py)."""
        return self._mapping


def map_image(path: Path, fingerprint: str) -> WeightImage:
    """Map an image read-only and check it; raise WeightImageError if it cannot be trusted."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise WeightImageError(f"no weight image at {path}") from None
    try:
        size = os.fstat(fd).st_size
        if size < PREAMBLE.size:
            raise WeightImageError(f"weight image truncated at byte {size}: {path}")
        # Populate up front: the first decoded token would otherwise pay ~135k page faults.
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        mapping = mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    try:
        magic, version, meta_len, data_off, data_len = PREAMBLE.unpack_from(mapping, 0)
        if magic != IMAGE_MAGIC:
            raise WeightImageError(f"not a weight image (magic {magic!r}): {path}")
        if version != IMAGE_VERSION:
            raise WeightImageError(f"weight image version {version} unsupported: {path}")
        if PREAMBLE.size + meta_len > data_off or data_off + data_len != size:
            raise WeightImageError(f"weight image truncated or padded ({size} bytes): {path}")
        meta = json.loads(bytes(mapping[PREAMBLE.size : PREAMBLE.size + meta_len]))
        if meta.get("fingerprint") != fingerprint:
            raise WeightImageError(f"weight image belongs to another model: {path}")
        cfg = ModelConfig.from_dict(meta["config"])
        views: dict[str, np.ndarray] = {}
        for name, shape in image_plan(cfg).items():
            offset, stored_shape = meta["tensors"][name]
            count = int(np.prod(shape))
            in_bounds = offset % TENSOR_ALIGN == 0 and offset + 4 * count <= data_len
            if tuple(stored_shape) != shape or not in_bounds:
                raise WeightImageError(f"weight image tensor {name} out of bounds: {path}")
            view = np.frombuffer(mapping, np.float32, count, data_off + offset)
            views[name] = view.reshape(shape)
    except WeightImageError:
        mapping.close()
        raise
    except (ValueError, KeyError, TypeError) as exc:
        mapping.close()
        raise WeightImageError(f"weight image metadata unreadable ({exc}): {path}") from None
    return WeightImage(path, cfg, _weights_from_views(cfg, views), mapping)


def _weights_from_views(cfg: ModelConfig, v: dict[str, np.ndarray]) -> Weights:
    layers = tuple(
        LayerWeights(
            attn_norm=v[f"blk.{i}.attn_norm"],
            ffn_norm=v[f"blk.{i}.ffn_norm"],
            w_gate_up=v[f"blk.{i}.w_gate_up"],
            w_down=v[f"blk.{i}.w_down"],
            wqkv=v.get(f"blk.{i}.wqkv"),
            wo=v.get(f"blk.{i}.wo"),
            conv_in=v.get(f"blk.{i}.conv_in"),
            conv_weight=v.get(f"blk.{i}.conv_weight"),
            conv_out=v.get(f"blk.{i}.conv_out"),
            bqkv=v.get(f"blk.{i}.bqkv"),
            q_norm=v.get(f"blk.{i}.q_norm"),
            k_norm=v.get(f"blk.{i}.k_norm"),
            post_attn_norm=v.get(f"blk.{i}.post_attention_norm"),
            post_ffn_norm=v.get(f"blk.{i}.post_ffw_norm"),
            delta_in=v.get(f"blk.{i}.delta_in"),
            delta_conv=v.get(f"blk.{i}.delta_conv"),
            delta_dt=v.get(f"blk.{i}.delta_dt"),
            delta_a=v.get(f"blk.{i}.delta_a"),
            delta_norm=v.get(f"blk.{i}.delta_norm"),
            delta_out=v.get(f"blk.{i}.delta_out"),
        )
        for i in range(cfg.n_layers)
    )
    return Weights(
        token_embd=v["token_embd"],
        output=v.get("output", v["token_embd"]),
        output_norm=v["output_norm"],
        layers=layers,
        nbytes=sum(a.nbytes for a in v.values()),
    )
