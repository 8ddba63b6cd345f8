"""DELTA layers (Qwen3.5's gated delta net) in the numpy forward pass: the reference.

The layer (engine/model/delta_net.py says what each tensor is) runs in attention's place on R
normed rows (a prefill chunk, or the one decode row), in the same code for both phases:

1. one matmul makes q | k | v, z, beta and alpha for every row (LayerWeights.delta_in);
2. q | k | v go through the causal depthwise convolution over the carry then the rows, laid
   end to end as in shortconv.py (the window's last conv_kernel - 1 rows become the carry),
   then SiLU; q and k are L2-normalised per head, q scaled by 1/sqrt(head);
3. token by token, each value head's state S (head x head) is decayed by
   exp(ssm_a * softplus(alpha + ssm_dt)), then corrected toward v along k:
   S += k (sigmoid(beta) (v - k.S)), and read by q: o = q.S. This is the delta rule as
   transformers' torch_recurrent_gated_delta_rule writes it, one token at a time, so that
   the state after a chunk is the state after its last token whatever the chunking;
4. each head's output is RMS-normed, times SiLU(z), and ssm_out projects it back.

Value head h reads key head h % k_heads (the GGUF's tiled order), so the state is viewed as
(v_heads / k_heads, k_heads, head, head) and the key heads broadcast over the first axis.
Each head's matrix is stored transposed, value index first (state[h][j][i] = S[i][j]), as
ggml_gated_delta_net keeps it, so either backend continues the other's state.
Every intermediate is an arena scratch view (numpy/scratch.py's d_* regions): nothing is
allocated per token.
"""

from __future__ import annotations

import math

import numpy as np

from ...model.config import ModelConfig
from ...model.weights import LayerWeights
from ...state.arena import ArenaViews
from .ops import rmsnorm_heads

L2_EPS = 1e-6  # transformers' l2norm (and FLA's): x / sqrt(sum x^2 + 1e-6)


def _silu(x: np.ndarray, tmp: np.ndarray) -> None:
    """x = x * sigmoid(x), in place; tmp is scratch shaped like x."""
    np.negative(x, out=tmp)
    np.exp(tmp, out=tmp)
    np.add(tmp, 1.0, out=tmp)
    np.divide(x, tmp, out=x)


def _l2_normalise(x: np.ndarray, tmp: np.ndarray) -> None:
    """Every head vector of x (..., heads, head) to unit length, in place; tmp (..., heads)."""
    np.einsum("...i,...i->...", x, x, out=tmp)
    np.add(tmp, L2_EPS, out=tmp)
    np.sqrt(tmp, out=tmp)
    np.reciprocal(tmp, out=tmp)
    np.multiply(x, tmp[..., None], out=x)


def delta_net(lw: LayerWeights, cfg: ModelConfig, xn: np.ndarray, carry: np.ndarray,
              state: np.ndarray, v: ArenaViews, out: np.ndarray) -> None:
    """The gated delta net of R normed rows `xn` (R, d), or one row (d,), into `out` (same
    shape), updating `carry` (taps - 1, conv_dim) and `state` (v_heads, head, head; each
    head's S transposed) in place."""
    nk, nv, hd = cfg.delta_k_heads, cfg.delta_v_heads, cfg.delta_head_dim
    conv, inner, K = cfg.delta_conv_dim, cfg.delta_inner, cfg.conv_kernel - 1
    reps = nv // nk
    xn2, out2 = xn.reshape(-1, xn.shape[-1]), out.reshape(-1, out.shape[-1])
    R = xn2.shape[0]
    proj = v.d_proj[:R]
    np.matmul(xn2, lw.delta_in.T, out=proj)
    z = proj[:, conv : conv + inner]
    beta, gate = proj[:, conv + inner : conv + inner + nv], proj[:, conv + inner + nv :]

    # The convolution over the carry, then SiLU: qkv (R, conv) holds q | k | v after.
    window, qkv, tmp = v.d_win[: K + R], v.d_conv[:R], v.d_tmp[:R]
    np.copyto(window[:K], carry)
    np.copyto(window[K:], proj[:, :conv])
    np.multiply(window[:R], lw.delta_conv[:, 0], out=qkv)
    for j in range(1, K + 1):
        np.multiply(window[j : j + R], lw.delta_conv[:, j], out=tmp)
        np.add(qkv, tmp, out=qkv)
    np.copyto(carry, window[R:])
    _silu(qkv, tmp)
    qk = qkv[:, : 2 * nk * hd].reshape(R, 2 * nk, hd)  # q heads, then k heads
    _l2_normalise(qk, v.d_heads[:R, : 2 * nk])
    np.multiply(qkv[:, : nk * hd], 1.0 / math.sqrt(hd), out=qkv[:, : nk * hd])

    # Per row and head: the decay exp(a * softplus(alpha + dt)) and sigmoid(beta).
    np.add(gate, lw.delta_dt, out=gate)
    np.logaddexp(gate, 0.0, out=gate)
    np.multiply(gate, lw.delta_a, out=gate)
    np.exp(gate, out=gate)
    np.negative(beta, out=beta)
    np.exp(beta, out=beta)
    np.add(beta, 1.0, out=beta)
    np.reciprocal(beta, out=beta)

    # The delta rule, token by token, every head at once.
    St = state.reshape(reps, nk, hd, hd)  # S^T: (value, key) per head
    mem, outer = v.d_mem.reshape(reps, nk, hd, 1), v.d_outer.reshape(reps, nk, hd, hd)
    o = v.d_o[:R]
    for t in range(R):
        q_t = qkv[t, : nk * hd].reshape(nk, hd, 1)
        k_t = qkv[t, nk * hd : 2 * nk * hd].reshape(nk, hd, 1)
        v_t = qkv[t, 2 * nk * hd :].reshape(reps, nk, hd, 1)
        np.multiply(state, gate[t, :, None, None], out=state)
        np.matmul(St, k_t, out=mem)  # what S recalls for k: (reps, nk, head, 1)
        np.subtract(v_t, mem, out=mem)
        np.multiply(mem, beta[t].reshape(reps, nk, 1, 1), out=mem)
        np.multiply(mem, k_t.reshape(nk, 1, hd), out=outer)  # (beta (v - S^T k)) k^T
        np.add(St, outer, out=St)
        np.matmul(St, q_t, out=o[t].reshape(reps, nk, hd, 1))

    # Gated RMSNorm per head, then the output projection.
    heads = o.reshape(R, nv, hd)
    rmsnorm_heads(heads, lw.delta_norm, v.d_heads[:R, :nv], cfg.rms_eps)
    _silu(z, v.d_ztmp[:R])
    np.multiply(o, z, out=o)
    np.matmul(o, lw.delta_out.T, out=out2)
