"""DELTA layers (Qwen3.5's gated delta net): their tensors and their geometry in the GGUF.

A DELTA layer runs in attention's place, after the layer's operator norm:

- one projection makes q | k | v (`attn_qkv`, conv_dim = 2 * k_heads * head + v_heads * head
  rows), and others the output gate z (`attn_gate`, v_heads * head rows), the write strength
  (`ssm_beta`, one row per value head) and the decay's input (`ssm_alpha`, likewise);
- q | k | v go through a causal depthwise convolution of `ssm.conv_kernel` taps per channel
  (`ssm_conv1d`, (conv_dim, taps)) whose carry is the last taps - 1 rows, then SiLU;
- q and k are L2-normalised per head (q also scaled by 1/sqrt(head)); each value head h keeps
  a head x head matrix S, decayed by exp(ssm_a * softplus(alpha + ssm_dt)), then moved toward
  v along k with strength sigmoid(beta) (the delta rule), and read by q;
- the heads' outputs are RMS-normed (`ssm_norm`, per head) times SiLU(z), then `ssm_out`.

llama.cpp's converter stores the value heads tiled over the key heads (value head h reads key
head h % k_heads; HF's order groups them, h // (v_heads / k_heads)), `ssm_a` as -exp(A_log),
and the norms of the trunk with HF's +1 folded in (not `ssm_norm`). The GGUF keys follow
llama.cpp's LLM_KV_SSM_*: the key head width is `ssm.state_size`, the key heads
`ssm.group_count`, the value heads `ssm.time_step_rank`, and `ssm.inner_size` is their width.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DELTA_TENSORS = ["attn_qkv.weight", "attn_gate.weight", "ssm_conv1d.weight", "ssm_dt.bias",
                 "ssm_a", "ssm_beta.weight", "ssm_alpha.weight", "ssm_norm.weight",
                 "ssm_out.weight"]

# (metadata key under the architecture's prefix, what it is), each a positive count.
DELTA_KEYS = (("ssm.conv_kernel", "convolution taps"), ("ssm.state_size", "key head width"),
              ("ssm.group_count", "key heads"), ("ssm.time_step_rank", "value heads"),
              ("ssm.inner_size", "value width"))

Metadata = Callable[[str], Any]


def delta_metadata_problem(get: Metadata) -> str | None:
    """Why a GGUF's DELTA geometry is unusable, or None (every key a count, taps >= 2,
    value heads a multiple of the key heads, and the value width value heads x head)."""
    name = get("general.architecture")
    values = {}
    for key, what in DELTA_KEYS:
        value = get(f"{name}.{key}")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return f"{name}: metadata '{name}.{key}' ({what}) is not a count ({value!r:.40})"
        values[key] = value
    if values["ssm.conv_kernel"] < 2:
        return f"{name}: a delta-net convolution of {values['ssm.conv_kernel']} tap is not one"
    k_heads, v_heads = values["ssm.group_count"], values["ssm.time_step_rank"]
    if v_heads % k_heads:
        return f"{name}: {v_heads} value heads over {k_heads} key heads are not implemented"
    if values["ssm.inner_size"] != v_heads * values["ssm.state_size"]:
        return (f"{name}: value heads narrower or wider than key heads "
                f"({values['ssm.inner_size']} != {v_heads} x {values['ssm.state_size']}) "
                f"are not implemented")
    return None


def delta_tensor_shapes(d_model: int, k_heads: int, v_heads: int, head: int,
                        taps: int) -> dict[str, tuple[int, ...]]:
    """Each DELTA tensor's shape in numpy order (GGUF's reversed), by its name in the layer."""
    conv_dim, inner = 2 * k_heads * head + v_heads * head, v_heads * head
    return {"attn_qkv.weight": (conv_dim, d_model), "attn_gate.weight": (inner, d_model),
            "ssm_conv1d.weight": (conv_dim, taps), "ssm_dt.bias": (v_heads,),
            "ssm_a": (v_heads,), "ssm_beta.weight": (v_heads, d_model),
            "ssm_alpha.weight": (v_heads, d_model), "ssm_norm.weight": (head,),
            "ssm_out.weight": (d_model, inner)}


def add_delta_metadata(writer: Any, conv_kernel: int, k_heads: int, v_heads: int, head: int,
                       interval: int, rotary_dim: int) -> None:
    """Write a qwen35 GGUF's delta-net keys to a gguf.GGUFWriter, as llama.cpp's converter
    does (LLM_KV_SSM_*): the keys delta_metadata_problem reads. For fixtures and synthetic
    files. llama.cpp also requires MRoPE's sections: text positions make them all alike,
    so its converter's default split of the rotated pairs."""
    writer.add_ssm_conv_kernel(conv_kernel)
    writer.add_ssm_state_size(head)
    writer.add_ssm_group_count(k_heads)
    writer.add_ssm_time_step_rank(v_heads)
    writer.add_ssm_inner_size(v_heads * head)
    if interval:
        writer.add_full_attention_interval(interval)
    pairs = rotary_dim // 2
    writer.add_rope_dimension_sections([pairs - 2 * (pairs // 3), pairs // 3, pairs // 3, 0])
