"""An independent, deliberately plain float64 llama forward pass straight from a GGUF.

It shares no code with the engine: it reads tensors with gguf-py, recomputes every position
from scratch and uses per-head loops, so agreement with the engine means something.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFReader, quants


def load(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    r = GGUFReader(path)

    def meta(key, default=None):
        f = r.fields.get(key)
        return default if f is None else f.contents()

    hp = {
        "layers": meta("llama.block_count"),
        "heads": meta("llama.attention.head_count"),
        "kv_heads": meta("llama.attention.head_count_kv"),
        "theta": meta("llama.rope.freq_base"),
        "eps": meta("llama.attention.layer_norm_rms_epsilon"),
    }
    tensors = {}
    for t in r.tensors:
        a = quants.dequantize(t.data, t.tensor_type)
        tensors[t.name] = np.array(a, dtype=np.float64).reshape(
            tuple(int(x) for x in reversed(t.shape))
        )
    return hp, tensors


def logits(hp: dict, w: dict[str, np.ndarray], ids: list[int],
           positions: list[int] | None = None) -> np.ndarray:
    """Logits (T, vocab) for every position of `ids` (causal), at the given RoPE positions."""
    T = len(ids)
    pos = np.arange(T) if positions is None else np.asarray(positions)
    x = w["token_embd.weight"][ids]
    d = x.shape[1]
    H, KVH = hp["heads"], hp["kv_heads"]
    hd = d // H

    def norm(v, weight):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + hp["eps"]) * weight

    def rope(v):  # v (T, heads, hd), interleaved pairs
        inv = hp["theta"] ** (-np.arange(0, hd, 2) / hd)
        ang = pos[:, None] * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        out = v.copy()
        out[..., 0::2] = v[..., 0::2] * c - v[..., 1::2] * s
        out[..., 1::2] = v[..., 0::2] * s + v[..., 1::2] * c
        return out

    for i in range(hp["layers"]):
        p = f"blk.{i}."
        h = norm(x, w[p + "attn_norm.weight"])
        q = rope((h @ w[p + "attn_q.weight"].T).reshape(T, H, hd))
        k = rope((h @ w[p + "attn_k.weight"].T).reshape(T, KVH, hd))
        v = (h @ w[p + "attn_v.weight"].T).reshape(T, KVH, hd)
        out = np.zeros((T, H, hd))
        for head in range(H):
            kv = head // (H // KVH)
            s = q[:, head] @ k[:, kv].T / np.sqrt(hd)
            s[np.triu_indices(T, 1)] = -np.inf
            s = np.exp(s - s.max(1, keepdims=True))
            s /= s.sum(1, keepdims=True)
            out[:, head] = s @ v[:, kv]
        x = x + out.reshape(T, d) @ w[p + "attn_output.weight"].T
        h = norm(x, w[p + "ffn_norm.weight"])
        g = h @ w[p + "ffn_gate.weight"].T
        u = h @ w[p + "ffn_up.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
    x = norm(x, w["output_norm.weight"])
    out_w = w.get("output.weight", w["token_embd.weight"])
    return x @ out_w.T
