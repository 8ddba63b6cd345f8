"""Which GGUF tensors make each tensor of the f32 weight image (weights.py), and in what
order their rows are stacked: the image keeps one layout per role whatever the architecture
(q | k | v rows in one matrix, gate then up rows in another), so the forward passes read one."""

from __future__ import annotations

import numpy as np

from .config import ModelConfig


def image_sources(cfg: ModelConfig, name: str) -> list[str]:
    """The GGUF tensors whose rows, stacked, make image tensor `name`."""
    arch = cfg.arch
    blk, _, role = name.rpartition(".")
    if role == "wqkv":
        if arch.fused_qkv:
            return [f"{blk}.attn_qkv.weight"]
        return [f"{blk}.attn_q.weight", f"{blk}.attn_k.weight", f"{blk}.attn_v.weight"]
    if role == "bqkv":
        return [f"{blk}.attn_q.bias", f"{blk}.attn_k.bias", f"{blk}.attn_v.bias"]
    if role == "delta_in":  # one matmul makes all four
        return [f"{blk}.{t}.weight" for t in ("attn_qkv", "attn_gate", "ssm_beta", "ssm_alpha")]
    if role == "ffn_norm":
        return [f"{blk}.{arch.ffn_norm}.weight"]
    if role == "w_gate_up":
        if arch.fused_gate_up:  # already gate rows then up rows
            return [f"{blk}.ffn_up.weight"]
        return [f"{blk}.ffn_gate.weight", f"{blk}.ffn_up.weight"]
    renames = {".wo": ".attn_output.weight", ".w_down": ".ffn_down.weight",
               ".q_norm": ".attn_q_norm.weight", ".k_norm": ".attn_k_norm.weight",
               ".conv_in": ".shortconv.in_proj.weight", ".conv_weight": ".shortconv.conv.weight",
               ".conv_out": ".shortconv.out_proj.weight", ".delta_conv": ".ssm_conv1d.weight",
               ".delta_dt": ".ssm_dt.bias", ".delta_a": ".ssm_a",
               ".delta_norm": ".ssm_norm.weight", ".delta_out": ".ssm_out.weight"}
    for suffix, gguf_suffix in renames.items():
        if name.endswith(suffix):
            return [name[: -len(suffix)] + gguf_suffix]
    if name == "output_norm":  # LFM2's is token_embd_norm
        return [f"{arch.output_norm}.weight"]
    return [name + ".weight"]


def arranged(cfg: ModelConfig, name: str, parts: list[np.ndarray]) -> list[np.ndarray]:
    """The parts of image tensor `name` in the order it stacks them. A gated query's attn_q
    holds, per head, the query rows then the gate rows; the image keeps q | k | v first, as
    every attention layer has them, and the gates after (ModelConfig.qkv_dim)."""
    if not (cfg.arch.gated_query and name.endswith(".wqkv")):
        return parts
    q_gate, k, v = parts
    heads = q_gate.reshape(cfg.n_heads, 2, cfg.head_dim, -1)
    return [heads[:, 0].reshape(cfg.q_dim, -1), k, v, heads[:, 1].reshape(cfg.q_dim, -1)]
