"""The numpy forward pass's scratch regions in the conversation's arena.

Only this backend computes in host arrays, so only its arenas carry these: every decode and
prefill intermediate has a region here, written with `out=`, so a ready conversation's passes
allocate nothing. (The regions every backend shares, such as logits and mass, are laid out by
engine/state/arena.py.)
"""

from __future__ import annotations

import numpy as np

from ...model.architecture import CONV, DELTA
from ...model.config import ModelConfig
from ...state.layout import ArenaLayout
from ...state.ring_policy import RingPolicy


def add_numpy_scratch(lay: ArenaLayout, cfg: ModelConfig, policy: RingPolicy) -> None:
    S, C = policy.max_slots, policy.prefill_chunk
    H, KVH, hd, G = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.group_size
    d, F, half = cfg.d_model, cfg.ffn_dim, cfg.head_dim // 2
    f32 = np.float32
    W = cfg.window  # WINDOW layers attend over up to W rows (decode), W + C (prefill)

    # Decode scratch: one token.
    lay.add("x", f32, (d,))  # residual stream
    lay.add("xn", f32, (d,))  # normed residual
    lay.add("qkv", f32, (cfg.qkv_dim,))  # q | k | v
    lay.add("attn", f32, (cfg.q_dim,))  # per-head attention output
    lay.add("proj", f32, (d,))
    lay.add("gate_up", f32, (2 * F,))
    lay.add("ffn", f32, (F,))
    lay.add("scores", f32, (H * max(S, W),))  # (H, n) attention probabilities, n <= S
    lay.add("row_max", f32, (H,))
    lay.add("row_sum", f32, (H,))
    lay.add("rope_a", f32, ((H + KVH) * half,))
    lay.add("rope_b", f32, ((H + KVH) * half,))
    lay.add("mass_step", f32, (S,))

    # Prefill scratch: a chunk of C tokens at once.
    lay.add("p_tokens", np.int64, (C,))
    lay.add("p_x", f32, (C, d))
    lay.add("p_qkv", f32, (C, cfg.qkv_dim))
    lay.add("p_q", f32, (C * G, hd))  # one K/V group's queries, rows (token, head)
    lay.add("p_scores", f32, (C * G * max(S, W + C),))  # (C*G, n) for one group
    lay.add("p_row_max", f32, (C * G,))
    lay.add("p_row_sum", f32, (C * G,))
    lay.add("p_o", f32, (C * G, hd))
    lay.add("p_attn", f32, (C, cfg.q_dim))
    lay.add("p_proj", f32, (C, d))
    lay.add("p_gate_up", f32, (C, 2 * F))
    lay.add("p_ffn", f32, (C, F))
    lay.add("p_rope_a", f32, (C, H + KVH, half))
    lay.add("p_rope_b", f32, (C, H + KVH, half))
    lay.add("p_norm", f32, (C,))
    # The chunk's RoPE rows (decode uses the first): model/rope.py computes them per pass.
    lay.add("p_cos", f32, (C, half))
    lay.add("p_sin", f32, (C, half))
    lay.add("p_rope_pos", np.float64, (C, 1))
    lay.add("p_rope_angle", np.float64, (C, half))
    if W:  # a chunk's window: the plane's rows, then the chunk's own (numpy/window.py)
        lay.add("p_cos_w", f32, (C, half))  # and its RoPE rows: Gemma 3's local base
        lay.add("p_sin_w", f32, (C, half))
        lay.add("p_wk", f32, (W + C, cfg.kv_dim))
        lay.add("p_wv", f32, (W + C, cfg.kv_dim))
        lay.add("p_wmask", f32, (C * (W + C),))
    if cfg.arch.qk_norm:
        lay.add("qk_norm", f32, (H + KVH,))  # one inverse RMS per head
        lay.add("p_qk_norm", f32, (C, H + KVH))
    if DELTA in cfg.kinds:  # DELTA layers' rows (numpy/delta.py); decode uses the first
        K, conv, hd = cfg.conv_kernel - 1, cfg.delta_conv_dim, cfg.delta_head_dim
        nk, nv = cfg.delta_k_heads, cfg.delta_v_heads
        lay.add("d_proj", f32, (C, conv + cfg.delta_inner + 2 * nv))  # qkv | z | beta | alpha
        lay.add("d_win", f32, (K + C, conv))  # the carry, then the rows' q | k | v
        lay.add("d_conv", f32, (C, conv))
        lay.add("d_tmp", f32, (C, conv))
        lay.add("d_heads", f32, (C, max(2 * nk, nv)))  # one norm per head
        lay.add("d_mem", f32, (nv * hd,))
        lay.add("d_outer", f32, (nv, hd, hd))
        lay.add("d_o", f32, (C, cfg.delta_inner))
        lay.add("d_ztmp", f32, (C, cfg.delta_inner))
    if CONV in cfg.kinds:  # CONV layers' B | C | x, and their carry then B*x (numpy/shortconv.py)
        K = cfg.conv_kernel - 1
        lay.add("bcx", f32, (3 * d,))
        lay.add("conv_win", f32, (K + 1, d))
        lay.add("p_bcx", f32, (C, 3 * d))
        lay.add("p_conv_win", f32, (K + C, d))
