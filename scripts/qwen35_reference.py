"""transformers' Qwen3.5 (`qwen3_5`) over the weights of a tiny `qwen35` GGUF, for
scripts/make_arch_reference.py.

transformers' GGUF loader does not read qwen35, so this undoes what llama.cpp's converter
(convert_hf_to_gguf.py: Qwen3NextModel, _LinearAttentionVReorderBase) does on the way in:
the trunk's RMSNorm weights lose the +1 folded into them (not the delta net's gated norm),
`ssm_a` = -exp(A_log) goes back to A_log, the delta net's value heads go from llama.cpp's
tiled order back to HF's grouped order, the convolution gets its channel axis back, and
`attn_qkv` / `attn_gate` are in_proj_qkv / in_proj_z. Weights are dequantized with gguf-py, as
the engine dequantizes them, so both sides compute on the same numbers in float32.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from gguf import GGUFReader
from transformers.models.qwen3_5 import Qwen3_5ForCausalLM, Qwen3_5TextConfig

from engine.model.gguf_file import open_model


def _tensors(path: Path) -> dict[str, np.ndarray]:
    from engine.model.weights import _dequantize  # the engine's own dequantization

    model = open_model(path)
    return {t.name: _dequantize(model, t.name) for t in GGUFReader(path, "r").tensors}


def grouped(t: np.ndarray, k_heads: int, v_heads: int, head: int, axis: int = 0) -> np.ndarray:
    """Value heads along `axis` from llama.cpp's tiled order (head j * k + i) to HF's
    grouped one (head i * r + j), r = v_heads / k_heads."""
    r = v_heads // k_heads
    t = np.moveaxis(t, axis, 0)
    rest = t.shape[1:]
    t = t.reshape(r, k_heads, head, *rest).swapaxes(0, 1).reshape(v_heads * head, *rest)
    return np.ascontiguousarray(np.moveaxis(t, 0, axis))


def qwen35_model(path: Path) -> torch.nn.Module:
    """Qwen3_5ForCausalLM in float32 with eager attention, holding the GGUF's weights."""
    cfg = open_model(path).config
    nk, nv, hd = cfg.delta_k_heads, cfg.delta_v_heads, cfg.delta_head_dim
    pairs = cfg.rotary_dim // 2
    sections = [pairs - 2 * (pairs // 3), pairs // 3, pairs // 3]  # all equal for text
    config = Qwen3_5TextConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.ffn_dim,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads, head_dim=cfg.head_dim, rms_norm_eps=cfg.rms_eps,
        max_position_embeddings=cfg.context_length, tie_word_embeddings=cfg.tied_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta,
                         "partial_rotary_factor": cfg.rotary_dim / cfg.head_dim,
                         "mrope_section": sections, "mrope_interleaved": True},
        linear_conv_kernel_dim=cfg.conv_kernel, linear_key_head_dim=hd,
        linear_value_head_dim=hd, linear_num_key_heads=nk, linear_num_value_heads=nv,
        layer_types=["linear_attention" if kind == "delta" else "full_attention"
                     for kind in cfg.kinds])
    config._attn_implementation = "eager"
    g = _tensors(path)
    qk = 2 * nk * hd

    def norm(name: str) -> np.ndarray:
        return g[name] - 1.0  # Qwen3_5RMSNorm multiplies by 1 + weight

    sd = {"model.embed_tokens.weight": g["token_embd.weight"],
          "model.norm.weight": norm("output_norm.weight")}
    if not cfg.tied_embeddings:
        sd["lm_head.weight"] = g["output.weight"]
    for i, kind in enumerate(cfg.kinds):
        b, p = f"blk.{i}.", f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = norm(b + "attn_norm.weight")
        sd[p + "post_attention_layernorm.weight"] = norm(b + "post_attention_norm.weight")
        for hf, gg in (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")):
            sd[p + f"mlp.{hf}.weight"] = g[b + gg + ".weight"]
        if kind == "delta":
            a = p + "linear_attn."
            qkv = g[b + "attn_qkv.weight"]
            sd[a + "in_proj_qkv.weight"] = np.concatenate(
                [qkv[:qk], grouped(qkv[qk:], nk, nv, hd)])
            sd[a + "in_proj_z.weight"] = grouped(g[b + "attn_gate.weight"], nk, nv, hd)
            sd[a + "in_proj_b.weight"] = grouped(g[b + "ssm_beta.weight"], nk, nv, 1)
            sd[a + "in_proj_a.weight"] = grouped(g[b + "ssm_alpha.weight"], nk, nv, 1)
            sd[a + "A_log"] = np.log(-grouped(g[b + "ssm_a"], nk, nv, 1))
            sd[a + "dt_bias"] = grouped(g[b + "ssm_dt.bias"], nk, nv, 1)
            taps = g[b + "ssm_conv1d.weight"]
            sd[a + "conv1d.weight"] = np.concatenate(
                [taps[:qk], grouped(taps[qk:], nk, nv, hd)])[:, None, :]
            sd[a + "norm.weight"] = g[b + "ssm_norm.weight"]
            sd[a + "out_proj.weight"] = grouped(g[b + "ssm_out.weight"], nk, nv, hd, axis=1)
        else:
            a = p + "self_attn."
            for hf, gg in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                           ("o_proj", "attn_output")):
                sd[a + f"{hf}.weight"] = g[b + gg + ".weight"]
            sd[a + "q_norm.weight"] = norm(b + "attn_q_norm.weight")
            sd[a + "k_norm.weight"] = norm(b + "attn_k_norm.weight")
    model = Qwen3_5ForCausalLM(config).to(torch.float32)
    missing, unexpected = model.load_state_dict(
        {k: torch.from_numpy(np.array(v, np.float32)) for k, v in sd.items()},
        strict=False)
    if missing or unexpected:
        raise ValueError(f"weights do not fit qwen3_5: missing {missing}, unexpected {unexpected}")
    return model.eval()
