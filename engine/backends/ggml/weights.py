"""The model's weights as ggml tensors over the GGUF's own bytes: mapped read-only, zero-copy.

No weight is converted: each ggml tensor's data pointer is the address of its block data
inside the mapping, so RSS grows only by the pages decoding actually reads, and the page cache
shares them with every other process that maps the same file. The exception is the matrices
ggml has a faster interleaved layout for (repack.py): those are copied once, and their mapped
pages released.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import MissingTensorError, ModelFileChangedError
from ...model.architecture import CONV, DELTA, Architecture
from ...model.gguf_file import fingerprint_fd
from ...model.model import Model, TensorInfo
from ...model.model_files import FileIdentity
from .lib import free_with, ggml, host_buffer
from .repack import can_repack, repack_buffer_type

Tensor = object  # a ctypes pointer to a ggml_tensor
EXPANDED_ALWAYS = ("ssm_beta.weight", "ssm_alpha.weight")  # matmul(..., exact=True)
OUTPUT = "output.weight"


@dataclass(frozen=True)
class GgmlLayer:
    """One layer's tensors; which optional ones exist follows the architecture table."""

    attn_norm: Tensor  # the layer's pre-norm (a CONV layer's too)
    ffn_norm: Tensor
    w_up: Tensor  # (ffn, d), or (2*ffn, d) gate rows then up rows when w_gate is None
    w_down: Tensor
    w_gate: Tensor | None = None
    wo: Tensor | None = None  # None in a CONV layer, which has the three below instead
    conv_in: Tensor | None = None  # (3d, d): B rows, C rows, x rows (LFM2's shortconv)
    conv_kernel: Tensor | None = None  # (d, conv_kernel) taps, oldest first
    conv_out: Tensor | None = None  # (d, d)
    wq: Tensor | None = None  # None when wqkv holds q, k and v rows
    wk: Tensor | None = None
    wv: Tensor | None = None
    wqkv: Tensor | None = None
    bq: Tensor | None = None  # projection biases (qwen2)
    bk: Tensor | None = None
    bv: Tensor | None = None
    q_norm: Tensor | None = None  # (head_dim,) QK-norm weights (qwen3)
    k_norm: Tensor | None = None
    post_attn_norm: Tensor | None = None  # (d_model,) Gemma's norms before each residual add
    post_ffn_norm: Tensor | None = None
    # DELTA layers (Qwen3.5's gated delta net; model/delta_net.py names them):
    ssm_qkv: Tensor | None = None  # attn_qkv: (conv_dim, d)
    ssm_z: Tensor | None = None  # attn_gate: (inner, d)
    ssm_conv: Tensor | None = None  # ssm_conv1d: (conv_dim, taps), taps oldest first
    ssm_dt: Tensor | None = None  # (v_heads,)
    ssm_a: Tensor | None = None  # (v_heads,)
    ssm_beta: Tensor | None = None  # (v_heads, d)
    ssm_alpha: Tensor | None = None  # (v_heads, d)
    ssm_norm: Tensor | None = None  # (head,)
    ssm_out: Tensor | None = None  # (d, inner)


def _same_file_as_loaded(model: Model, fd: int) -> FileIdentity:
    """The identity of the open GGUF, which must hold the bytes the model was loaded from:
    tensor offsets come from them. A file replaced since (mapped when a session opens) is
    fingerprinted again, and refused if its bytes differ."""
    identity = FileIdentity.of(os.fstat(fd))
    if model.files is None or identity == model.files.loaded:
        return identity
    if fingerprint_fd(fd) != model.fingerprint:
        raise ModelFileChangedError(f"model file changed on disk since it was loaded "
                                    f"(restart Channel to load it anew): {model.path}")
    return identity


class GgmlWeights:
    """One mapping of a GGUF and a ggml tensor for every weight in it.

    Shared by every conversation of a process; immutable after construction.
    """

    def __init__(self, model: Model):
        g = ggml()
        self.path = Path(model.path)
        self.fingerprint = model.fingerprint
        with open(self.path, "rb") as f:
            identity = _same_file_as_loaded(model, f.fileno())
            self._mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if model.files is not None:  # a truncation in place would SIGBUS: checked per turn
            model.files.watch_mapping(self._mapping, self.path, "model file",
                                      "restart Channel once the file is whole", identity)
        base = np.frombuffer(self._mapping, np.uint8).ctypes.data
        self._mapping_address = base
        self._ctx = g.ggml_init(g.ggml_init_params(
            mem_size=(len(model.tensors) + 8) * g.ggml_tensor_overhead(), no_alloc=True))
        self._buffer = host_buffer(base, len(self._mapping))
        self._free = free_with(self, self._ctx, self._buffer)
        self.types: dict[str, int] = {}
        self._tensors: dict[str, Tensor] = {}
        for name, info in model.tensors.items():
            self._tensors[name] = self._wrap(g, name, info, base)
        cfg = model.config
        self._repacked: set[int] = set()  # addresses of the tensors in ggml's repacked layout
        # Qwen3.5's beta and alpha rows stay in the file's layout: the graph expands them to
        # f32 for every pass (delta_block.py), which a repacked layout would not allow.
        # Blocks past the trunk (Qwen3.5's MTP) are never read, so never copied either.
        trunk = tuple(f"blk.{i}." for i in range(cfg.n_layers))
        matrices = [(name, name) for name in model.tensors
                    if name.startswith(trunk) and not name.endswith(EXPANDED_ALWAYS)]
        # A tied output gets a repacked twin of the embedding, as llama.cpp gives it: the
        # logits product is the largest of a small model's decode step (Gemma 3's 262,144 x
        # 640), while get_rows keeps reading the embedding's plain rows from the mapping.
        matrices.append((OUTPUT, "token_embd.weight" if cfg.tied_embeddings else OUTPUT))
        self._repack(g, matrices, model)
        self.token_embd = self.tensor("token_embd.weight")
        self.output_norm = self.tensor(f"{cfg.arch.output_norm}.weight")
        # The embedding itself only where a tied one was not repacked (no repack buffer).
        tied_plain = cfg.tied_embeddings and OUTPUT not in self._tensors
        self.output = self.token_embd if tied_plain else self.tensor(OUTPUT)
        self.rope_freqs = self._tensors.get("rope_freqs.weight")  # Llama 3 RoPE factors
        self.layers = tuple(self._layer(i, cfg.arch, kind) for i, kind in enumerate(cfg.kinds))
        self.nbytes = sum(info.nbytes for info in model.tensors.values())

    def _wrap(self, g, name: str, info: TensorInfo, base: int) -> Tensor:
        ne = (ctypes.c_int64 * 4)(*info.shape, *([1] * (4 - len(info.shape))))
        tensor = g.ggml_new_tensor(self._ctx, info.ggml_type, len(info.shape), ne)
        g.ggml_set_name(tensor, name.encode())
        if g.ggml_nbytes(tensor) != info.nbytes:
            raise MissingTensorError(
                f"tensor {name}: {info.nbytes} bytes in the file, ggml expects "
                f"{g.ggml_nbytes(tensor)} for type {info.ggml_type} and shape {info.shape}")
        g.ggml_backend_tensor_alloc(self._buffer, tensor, base + info.offset)
        self.types[name] = int(info.ggml_type)
        return tensor

    def _repack(self, g, matrices: list[tuple[str, str]], model: Model) -> None:
        """Copy the matrices ggml has a faster interleaved layout for into its repack buffer
        (each (name, source): the file's tensor `source`, known from now on as `name`), and
        release their mapped pages; the token embedding's are read again, by get_rows, only
        for the rows it gathers."""
        buffer_type = repack_buffer_type()
        matrices = [(name, source) for name, source in matrices
                    if source in self._tensors and can_repack(self._tensors[source])]
        if buffer_type is None or not matrices:
            return
        ctx = g.ggml_init(g.ggml_init_params(
            mem_size=(len(matrices) + 1) * g.ggml_tensor_overhead(), no_alloc=True))
        twins = {}
        for name, source in matrices:
            plain = self._tensors[source].contents
            twins[name, source] = g.ggml_new_tensor(ctx, plain.type, 2, plain.ne)
        buffer = g.ggml_backend_alloc_ctx_tensors_from_buft(ctx, buffer_type)
        self._free_repacked = free_with(self, ctx, buffer)
        for (name, source), twin in twins.items():
            info = model.tensors[source]
            g.ggml_backend_tensor_set(twin, self._mapping_address + info.offset, 0, info.nbytes)
            self._tensors[name] = twin
            self._repacked.add(ctypes.addressof(twin.contents))
            self._release(info.offset, info.nbytes)

    def _release(self, offset: int, nbytes: int) -> None:
        """Drop the mapping's whole pages inside [offset, offset + nbytes) from this process
        (they stay in the page cache; reading them again just maps them back)."""
        start = -(-offset // mmap.PAGESIZE) * mmap.PAGESIZE
        end = (offset + nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
        if end > start and hasattr(mmap, "MADV_DONTNEED"):
            self._mapping.madvise(mmap.MADV_DONTNEED, start, end - start)

    def is_repacked(self, tensor: Tensor) -> bool:
        return ctypes.addressof(tensor.contents) in self._repacked

    def expands_in_prefill(self) -> bool:
        """Whether a prefill chunk expands some layer matrix to f32 (graph.py's matmul):
        one that is quantized and not repacked."""
        f32 = ggml().GGML_TYPE_F32
        return any(m.contents.type != f32 and not self.is_repacked(m)
                   for lw in self.layers for m in (lw.w_up, lw.w_down))

    def tensor(self, name: str) -> Tensor:
        try:
            return self._tensors[name]
        except KeyError:
            raise MissingTensorError(f"the model has no tensor {name!r}") from None

    def _layer(self, i: int, arch: Architecture, kind: str) -> GgmlLayer:
        def t(name: str, kind: str = "weight") -> Tensor:
            return self.tensor(f"blk.{i}.{name}.{kind}")

        parts: dict[str, Tensor] = {}
        if not arch.fused_gate_up:
            parts["w_gate"] = t("ffn_gate")
        if kind == DELTA:
            return GgmlLayer(
                attn_norm=t("attn_norm"), ffn_norm=t(arch.ffn_norm), w_up=t("ffn_up"),
                w_down=t("ffn_down"), ssm_qkv=t("attn_qkv"), ssm_z=t("attn_gate"),
                ssm_conv=t("ssm_conv1d"), ssm_dt=t("ssm_dt", "bias"),
                ssm_a=self.tensor(f"blk.{i}.ssm_a"), ssm_beta=t("ssm_beta"),
                ssm_alpha=t("ssm_alpha"), ssm_norm=t("ssm_norm"), ssm_out=t("ssm_out"), **parts)
        if kind == CONV:
            return GgmlLayer(attn_norm=t("attn_norm"), ffn_norm=t("ffn_norm"), w_up=t("ffn_up"),
                             w_down=t("ffn_down"), conv_in=t("shortconv.in_proj"),
                             conv_kernel=t("shortconv.conv"), conv_out=t("shortconv.out_proj"),
                             **parts)
        if arch.fused_qkv:
            parts["wqkv"] = t("attn_qkv")
        else:
            parts.update(wq=t("attn_q"), wk=t("attn_k"), wv=t("attn_v"))
        if arch.qkv_bias:
            parts.update(bq=t("attn_q", "bias"), bk=t("attn_k", "bias"), bv=t("attn_v", "bias"))
        if arch.qk_norm:
            parts.update(q_norm=t("attn_q_norm"), k_norm=t("attn_k_norm"))
        if arch.post_norms:
            parts.update(post_attn_norm=t("post_attention_norm"), post_ffn_norm=t("post_ffw_norm"))
        return GgmlLayer(attn_norm=t("attn_norm"), wo=t("attn_output"), ffn_norm=t(arch.ffn_norm),
                         w_up=t("ffn_up"), w_down=t("ffn_down"), **parts)

    def type_names(self) -> dict[str, int]:
        """How many tensors of each ggml type the model has, by type name."""
        g = ggml()
        counts: dict[str, int] = {}
        for kind in self.types.values():
            label = g.ggml_type_name(kind).decode()
            counts[label] = counts.get(label, 0) + 1
        return counts

    def close(self) -> None:
        self._free()
