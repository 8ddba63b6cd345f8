"""What each supported architecture is: one table entry per GGUF `general.architecture`.

Every supported model is a pre-norm decoder (RMSNorm before attention and before the gated
feed-forward, residual adds after each) with rotary positions and grouped-query attention.
What differs between architectures is listed here, in the spirit of gguf-py's MODEL_TENSORS:
the config, the weight loaders, every backend's forward pass and the snapshot identity read
this table rather than testing architecture names. A GGUF that needs anything the table does
not describe is refused with one line naming what is missing (support.py's `support_problem`).

Each backend declares the features (FEATURES below) its forward pass implements, and the
tensor types it reads (tensor_types.py's `<type>_weights` features); `backend_problem` says
why a backend cannot run a model, for the backend choice, `channel doctor` and `channel
models` alike.

Adding an architecture: one `Architecture` entry, plus a forward-pass feature in each backend
if it needs one the table cannot yet express (docs/models.md): name it in FEATURES, say when
a model needs it in `needed_features`, and add it to the backends that implement it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

# Layer kinds live in layer_kinds.py; they are named here too, where most modules look.
from .delta_net import DELTA_TENSORS
from .layer_kinds import CONV, DELTA, FULL, WINDOW, layer_kinds, layer_kv_heads, trunk_layers
from .layer_kinds import LAYER_KINDS as LAYER_KINDS
from .layer_kinds import swa_layer_kinds as swa_layer_kinds
from .tensor_types import ALL_TYPE_FEATURES, TYPE_FEATURES

INTERLEAVED = "interleaved"  # rotate (x[2i], x[2i+1]): llama.cpp permutes llama's Q/K rows so
SPLIT_HALF = "split_half"  # rotate (x[i], x[i + d/2]): HF's layout, kept by qwen2/qwen3/phi3


@dataclass(frozen=True)
class Architecture:
    name: str  # general.architecture, and the prefix of its metadata keys
    rope_style: str  # INTERLEAVED or SPLIT_HALF
    qkv_bias: bool = False  # attn_{q,k,v}.bias added after the projections (qwen2)
    qk_norm: bool = False  # attn_{q,k}_norm.weight: RMSNorm per head before RoPE (qwen3)
    fused_qkv: bool = False  # one attn_qkv.weight: q rows, then k, then v (phi3)
    fused_gate_up: bool = False  # ffn_up.weight holds gate rows, then up rows (phi3)
    # Per-frequency RoPE divisors in a `rope_freqs.weight` tensor (Llama 3.1+ "llama3" scaling).
    rope_freq_factors: bool = False
    # The GGUF's `attention.sliding_window` is a converter's artefact, not how the model runs:
    # phi3's converters record one that llama.cpp ignores (llama.cpp PR 13676); so do we.
    ignores_sliding_window: bool = False
    # Gemma's block: RMSNorm of the attention and of the feed-forward output before each
    # residual add (post_attention_norm, post_ffw_norm; ffn_norm stays the pre-norm).
    post_norms: bool = False
    geglu: bool = False  # the feed-forward gate is GELU (tanh approximation), not SiLU
    embed_scale: bool = False  # token embeddings are multiplied by sqrt(d_model)
    # Sliding-window layers laid out as llama.cpp's set_swa_pattern(n): every n-th layer
    # attends globally (FULL), the others see the newest `attention.sliding_window` tokens
    # (WINDOW) with RoPE base `swa_rope_base` and no RoPE scaling. 0: no such layers.
    swa_pattern: int = 0
    swa_rope_base: float = 0.0
    # Block counts whose queries are scaled by 1/sqrt(d_model / n_heads), not 1/sqrt(head_dim):
    # the GGUF does not carry query_pre_attn_scalar, so llama.cpp keys it on the model size.
    width_scaled_queries_at: frozenset[int] = frozenset()
    # Layers without K/V heads (a 0 in the per-layer `attention.head_count_kv`) are
    # short-convolution blocks (CONV), as in LFM2: see SHORT_CONV_TENSORS.
    conv_layers: bool = False
    output_norm: str = "output_norm"  # the final norm's tensor (LFM2's: token_embd_norm)
    # Qwen3.5's gated query: attn_q makes, per head, the query then as many gate rows; the
    # attention output is multiplied by sigmoid(gate) before attn_output.
    gated_query: bool = False
    # RoPE may rotate only the first `rope.dimension_count` dims of each head (Qwen3.5: 64
    # of 256), split-half within them; the rest pass through.
    partial_rotary: bool = False
    # Layers laid out as llama.cpp's qwen35: every n-th layer attends (FULL), the others are
    # gated delta-net layers (DELTA: see delta_net.py). 0: no such layers.
    delta_interval: int = 0
    ffn_norm: str = "ffn_norm"  # the norm before the feed-forward (Qwen3.5's: post_attention_norm)

    def layer_tensors(self, i: int, kind: str = FULL) -> list[str]:
        """The GGUF tensors layer i, of state kind `kind`, must have, and the only ones it
        may have."""
        blk = f"blk.{i}."
        names = ["attn_norm.weight", "attn_output.weight", f"{self.ffn_norm}.weight",
                 "ffn_down.weight", "ffn_up.weight"]
        names += ["attn_qkv.weight"] if self.fused_qkv else [
            "attn_q.weight", "attn_k.weight", "attn_v.weight"]
        if not self.fused_gate_up:
            names.append("ffn_gate.weight")
        if self.qkv_bias:
            names += ["attn_q.bias", "attn_k.bias", "attn_v.bias"]
        if self.qk_norm:
            names += ["attn_q_norm.weight", "attn_k_norm.weight"]
        if self.post_norms:
            names += ["post_attention_norm.weight", "post_ffw_norm.weight"]
        if kind == CONV:  # the short convolution takes attention's place; attn_norm stays
            names = [n for n in names if n == "attn_norm.weight" or not n.startswith("attn_")]
            names += SHORT_CONV_TENSORS
        if kind == DELTA:  # the gated delta net takes attention's place
            names = [n for n in names if n == "attn_norm.weight" or not n.startswith("attn_")]
            names += DELTA_TENSORS
        return [blk + name for name in names]

    def model_tensors(self, n_layers: int, tied: bool, has_rope_freqs: bool,
                      kinds: Sequence[str] = ()) -> list[str]:
        """Every tensor a model of n_layers layers (of these kinds; () is all FULL) has."""
        names = ["token_embd.weight", f"{self.output_norm}.weight"]
        if not tied:
            names.append("output.weight")
        if has_rope_freqs:
            names.append("rope_freqs.weight")
        for i in range(n_layers):
            names += self.layer_tensors(i, kinds[i] if kinds else FULL)
        return names


# A CONV layer's operator (LFM2's ShortConv), in place of attention's projections: in_proj
# makes (B, C, x) of d_model each; B*x goes through a causal depthwise convolution of
# conv_kernel taps (conv.weight, (d_model, conv_kernel)) whose carry is the last
# conv_kernel - 1 inputs; C times its output goes through out_proj.
SHORT_CONV_TENSORS = ["shortconv.in_proj.weight", "shortconv.conv.weight",
                      "shortconv.out_proj.weight"]


ARCHITECTURES: dict[str, Architecture] = {
    arch.name: arch
    for arch in (
        # Llama 1-3.x, SmolLM, Mistral 7B / Nemo and other llama-shaped GGUFs.
        Architecture("llama", INTERLEAVED, rope_freq_factors=True),
        Architecture("qwen2", SPLIT_HALF, qkv_bias=True),  # Qwen2, Qwen2.5
        Architecture("qwen3", SPLIT_HALF, qk_norm=True),  # Qwen3 dense
        Architecture("phi3", SPLIT_HALF, fused_qkv=True, fused_gate_up=True,  # Phi-3, Phi-4
                     ignores_sliding_window=True),
        # Gemma 3 (270M-27B; text only): five local layers (window 512 or 1024, RoPE base
        # 10,000) to one global; 27B's query_pre_attn_scalar is d_model / n_heads (168).
        Architecture("gemma3", SPLIT_HALF, qk_norm=True, post_norms=True, geglu=True,
                     embed_scale=True, swa_pattern=6, swa_rope_base=10000.0,
                     width_scaled_queries_at=frozenset({62})),
        # LFM2 (350M-2.6B, dense): short-convolution layers between grouped-query attention
        # layers with QK-norm; the final norm is named token_embd_norm (llama.cpp's
        # LLM_TENSOR_OUTPUT_NORM_LFM2, "fix for wrong tensor name").
        Architecture("lfm2", SPLIT_HALF, qk_norm=True, conv_layers=True,
                     output_norm="token_embd_norm"),
        # Qwen3.5 (0.8B-27B, dense; text only): three gated delta-net layers to one gated-query
        # attention layer with QK-norm and partial rotary; the norm before the feed-forward
        # is named post_attention_norm. MTP blocks (nextn_predict_layers) are ignored.
        Architecture("qwen35", SPLIT_HALF, qk_norm=True, gated_query=True, partial_rotary=True,
                     delta_interval=4, ffn_norm="post_attention_norm"),
    )
}

Metadata = Callable[[str], Any]  # key -> value or None

# What a forward pass may or may not implement, each with the words a refusal uses. The
# llama layout needs none of them (interleaved RoPE, separate q/k/v and gate/up matrices,
# q_dim == d_model), and RoPE scaling needs none: every backend takes its tables from
# model/rope.py.
FEATURES: dict[str, str] = {
    "split_half_rope": "split-half RoPE",
    "qkv_bias": "QKV bias",
    "qk_norm": "QK-norm",
    "fused_qkv": "fused QKV",
    "fused_gate_up": "fused gate/up",
    "wide_heads": "heads wider than d_model / n_heads",
    "window_layers": "sliding-window layers",
    "post_norms": "post-norms",
    "geglu": "GeGLU",
    "embed_scale": "embedding scaling",
    "conv_layers": "short-convolution layers",
    "gated_query": "gated queries",
    "partial_rotary": "partial rotary",
    "delta_layers": "gated delta-net layers",
}
ALL_FEATURES = frozenset(FEATURES)
# What a backend that implements every architecture feature and reads every tensor type
# (numpy's f32 image) declares.
EVERYTHING = ALL_FEATURES | ALL_TYPE_FEATURES


def needed_features(arch: Architecture, q_dim: int, d_model: int,
                    window_layers: bool = False, conv_layers: bool = False,
                    delta_layers: bool = False, partial_rotary: bool = False) -> frozenset[str]:
    """The FEATURES a model of `arch` with this geometry (WINDOW, CONV or DELTA layers, if
    it has them; RoPE on part of each head) needs of a forward pass."""
    needs = {
        "split_half_rope": arch.rope_style == SPLIT_HALF,
        "qkv_bias": arch.qkv_bias,
        "qk_norm": arch.qk_norm,
        "fused_qkv": arch.fused_qkv,
        "fused_gate_up": arch.fused_gate_up,
        "wide_heads": q_dim != d_model,
        "window_layers": window_layers,
        "post_norms": arch.post_norms,
        "geglu": arch.geglu,
        "embed_scale": arch.embed_scale,
        "conv_layers": conv_layers,
        "gated_query": arch.gated_query,
        "partial_rotary": partial_rotary,
        "delta_layers": delta_layers,
    }
    return frozenset(name for name, needed in needs.items() if needed)


def backend_problem(needed: Collection[str], architecture: str, backend: str,
                    implemented: Collection[str]) -> str | None:
    """Why `backend`, implementing `implemented`, cannot run a model of `architecture` that
    needs `needed` (needed_features, and the tensor types' features: tensor_types.py), or
    None."""
    missing = [FEATURES[name] for name in FEATURES if name in needed and name not in implemented]
    unread = [TYPE_FEATURES[name] for name in TYPE_FEATURES
              if name in needed and name not in implemented]
    reasons = []
    if missing:
        reasons.append(f"does not implement {', '.join(missing)} "
                       f"({architecture} needs {'it' if len(missing) == 1 else 'them'})")
    if unread:  # name what it does read: the types to look for in another file
        reads = [TYPE_FEATURES[name] for name in TYPE_FEATURES if name in implemented]
        reasons.append(f"does not read {', '.join(unread)} weights "
                       f"(it reads {', '.join(reads) or 'none'})")
    if not reasons:
        return None
    return f"the {BACKEND_TITLES.get(backend, backend)} backend {' and '.join(reasons)}"


BACKEND_TITLES = {"numpy": "numpy", "ggml": "ggml", "vulkan": "Vulkan"}


def metadata_features(get: Metadata) -> frozenset[str]:
    """needed_features of a GGUF from its header's metadata (a supported architecture)."""
    name = get("general.architecture")
    heads, d_model = get(f"{name}.attention.head_count"), get(f"{name}.embedding_length")
    head_dim = get(f"{name}.attention.key_length") or (d_model // heads if heads else 0)
    rope_dim = get(f"{name}.rope.dimension_count") or head_dim
    kinds = metadata_layer_kinds(get)
    return needed_features(ARCHITECTURES[name], (heads or 0) * head_dim, d_model or 0,
                           WINDOW in kinds, CONV in kinds, DELTA in kinds, rope_dim < head_dim)


def metadata_layer_kinds(get: Metadata, n_layers: int | None = None) -> tuple[str, ...]:
    """layer_kinds of a GGUF from its metadata, over its trunk's layers (trunk_layers)
    unless n_layers is given."""
    name = get("general.architecture")
    n_layers = trunk_layers(get) if n_layers is None else n_layers
    window = int(get(f"{name}.attention.sliding_window") or 0)
    interval = get(f"{name}.full_attention_interval")
    return layer_kinds(ARCHITECTURES[name], n_layers, window, layer_kv_heads(get, n_layers),
                       interval if isinstance(interval, int) else 0)


def query_scale(arch: Architecture, n_layers: int, d_model: int, n_heads: int,
                head_dim: int) -> float:
    """What queries are multiplied by before q.k."""
    if n_layers in arch.width_scaled_queries_at:
        return 1.0 / math.sqrt(d_model // n_heads)
    return 1.0 / math.sqrt(head_dim)
