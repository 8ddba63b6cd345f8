"""The numpy forward pass: batched prefill and single-token decode over the K/V ring.

Both passes write only into arena scratch views (`out=` everywhere), so after a conversation
is ready a decode step allocates no numpy buffers. Scalars are Python floats: an np.float64
scalar would silently promote the f32 pipeline to f64 and make decode ~15x slower.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ...model.weights import Weights
from ...state.arena import ArenaViews
from ...state.ring import KVRing, SlotSpan
from ..base import HiddenCallback, prefill_in_chunks


def rmsnorm(x: np.ndarray, weight: np.ndarray, out: np.ndarray, eps: float) -> None:
    """out = x / rms(x) * weight for one row x (d,)."""
    inv = 1.0 / math.sqrt(float(np.dot(x, x)) / x.shape[0] + eps)
    np.multiply(x, inv, out=out)
    np.multiply(out, weight, out=out)


def rmsnorm_rows(x: np.ndarray, weight: np.ndarray, out: np.ndarray, tmp: np.ndarray,
                 eps: float) -> None:
    """Row-wise RMSNorm of x (C, d) into out (C, d); tmp is (C,) scratch."""
    np.einsum("ij,ij->i", x, x, out=tmp)
    np.multiply(tmp, 1.0 / x.shape[1], out=tmp)
    np.add(tmp, eps, out=tmp)
    np.sqrt(tmp, out=tmp)
    np.reciprocal(tmp, out=tmp)
    np.multiply(x, tmp[:, None], out=out)
    np.multiply(out, weight, out=out)


def rmsnorm_heads(x: np.ndarray, weight: np.ndarray, tmp: np.ndarray, eps: float) -> None:
    """In-place RMSNorm of every head vector: x (..., heads, head_dim); tmp (..., heads)."""
    np.einsum("...i,...i->...", x, x, out=tmp)
    np.multiply(tmp, 1.0 / x.shape[-1], out=tmp)
    np.add(tmp, eps, out=tmp)
    np.sqrt(tmp, out=tmp)
    np.reciprocal(tmp, out=tmp)
    np.multiply(x, tmp[..., None], out=x)
    np.multiply(x, weight, out=x)


def silu_mul(gate: np.ndarray, up: np.ndarray, out: np.ndarray) -> None:
    """out = silu(gate) * up, where silu(g) = g / (1 + exp(-g))."""
    np.negative(gate, out=out)
    np.exp(out, out=out)
    np.add(out, 1.0, out=out)
    np.divide(gate, out, out=out)
    np.multiply(out, up, out=out)


def exp_rows(s: np.ndarray, row_max: np.ndarray, inv_sum: np.ndarray) -> None:
    """s (R, N) <- exp(s - rowmax) in place, inv_sum (R,) <- 1 / rowsum: softmax, unscaled."""
    np.max(s, axis=1, out=row_max)
    np.subtract(s, row_max[:, None], out=s)
    np.exp(s, out=s)
    np.sum(s, axis=1, out=inv_sum)
    np.reciprocal(inv_sum, out=inv_sum)


def softmax_few_rows(s: np.ndarray, row_max: np.ndarray, row_sum: np.ndarray) -> None:
    """In-place softmax for a handful of rows (decode's heads), row by row: a broadcast ufunc
    goes through numpy's buffered iterator, which mallocs up to 32 KB of scratch per call."""
    np.max(s, axis=1, out=row_max)
    for row, peak in zip(s, row_max):
        np.subtract(row, peak, out=row)
    np.exp(s, out=s)
    np.sum(s, axis=1, out=row_sum)
    np.reciprocal(row_sum, out=row_sum)
    for row, scale in zip(s, row_sum):
        np.multiply(row, scale, out=row)


class Forward:
    """Runs prefill and decode for one conversation against the shared weights."""

    def __init__(self, weights: Weights, ring: KVRing):
        self.w = weights
        self.ring = ring
        self.cfg = ring.cfg
        self.rope = ring.rope
        self.q_scale = 1.0 / math.sqrt(self.cfg.head_dim)

    # -- prefill ----------------------------------------------------------------------------
    def prefill(self, tokens: Sequence[int], *, anchors: bool = False,
                on_hidden: HiddenCallback | None = None,
                should_stop: Callable[[], bool] | None = None) -> np.ndarray | None:
        """Ingest tokens in chunks; return the logits after the last one (an arena view), or
        None if `should_stop` said so between chunks."""

        def run(span: SlotSpan, chunk: Sequence[int], last: bool) -> None:
            self._prefill_chunk(self.ring.arena.views(), span, chunk, on_hidden, last)

        done = prefill_in_chunks(self.ring, tokens, self.ring.policy.prefill_chunk, run,
                                 anchors=anchors, should_stop=should_stop)
        return self.ring.arena.views().logits if done else None

    def _prefill_chunk(self, v: ArenaViews, span: SlotSpan, chunk: Sequence[int],
                       on_hidden: HiddenCallback | None, final_logits: bool) -> None:
        v.check()
        cfg, w = self.cfg, self.w
        C, n = len(chunk), span.start
        N = n + C
        qd, kvd = cfg.q_dim, cfg.kv_dim
        toks = v.p_tokens[:C]
        toks[:] = chunk
        x, xn, tmp = v.p_x[:C], v.p_xn[:C], v.p_norm[:C]
        np.take(w.token_embd, toks, axis=0, out=x)
        v.mass[:N] = 0.0
        cos = self.rope.cos[span.pos : span.pos + C, None, :]
        sin = self.rope.sin[span.pos : span.pos + C, None, :]
        qkv, proj = v.p_qkv[:C], v.p_proj[:C]
        for layer, lw in enumerate(w.layers):
            rmsnorm_rows(x, lw.attn_norm, xn, tmp, cfg.rms_eps)
            np.matmul(xn, lw.wqkv.T, out=qkv)
            self._shape_qk(lw, qkv, v.p_qk_norm[:C] if cfg.arch.qk_norm else None)
            qk = qkv[:, : qd + kvd].reshape(C, cfg.n_heads + cfg.n_kv_heads, cfg.head_dim)
            self.rope.rotate(qk, cos, sin, v.p_rope_a[:C], v.p_rope_b[:C])
            v.k_cache[layer, n:N] = qkv[:, qd : qd + kvd]
            v.v_cache[layer, n:N] = qkv[:, qd + kvd :]
            self._prefill_attention(v, layer, n, C)
            np.matmul(v.p_attn[:C], lw.wo.T, out=proj)
            np.add(x, proj, out=x)
            rmsnorm_rows(x, lw.ffn_norm, xn, tmp, cfg.rms_eps)
            gate_up = v.p_gate_up[:C]
            np.matmul(xn, lw.w_gate_up.T, out=gate_up)
            F = cfg.ffn_dim
            silu_mul(gate_up[:, :F], gate_up[:, F:], v.p_ffn[:C])
            np.matmul(v.p_ffn[:C], lw.w_down.T, out=proj)
            np.add(x, proj, out=x)
        if on_hidden is not None:
            rmsnorm_rows(x, w.output_norm, xn, tmp, cfg.rms_eps)
            on_hidden(xn)
        if final_logits:
            rmsnorm(x[C - 1], w.output_norm, v.xn, cfg.rms_eps)
            np.dot(w.output, v.xn, out=v.logits)

    def _shape_qk(self, lw, qkv: np.ndarray, norm_tmp: np.ndarray | None) -> None:
        """The architecture's steps between the QKV projection and RoPE, in place on qkv
        (..., qkv_dim): the projections' bias, then QK-norm (norm_tmp: (..., H + KVH))."""
        cfg = self.cfg
        if lw.bqkv is not None:
            np.add(qkv, lw.bqkv, out=qkv)
        if norm_tmp is not None:
            H, KVH, hd, qd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.q_dim
            lead = qkv.shape[:-1]
            q = qkv[..., :qd].reshape(*lead, H, hd)
            k = qkv[..., qd : qd + cfg.kv_dim].reshape(*lead, KVH, hd)
            rmsnorm_heads(q, lw.q_norm, norm_tmp[..., :H], cfg.rms_eps)
            rmsnorm_heads(k, lw.k_norm, norm_tmp[..., H:], cfg.rms_eps)

    def _prefill_attention(self, v: ArenaViews, layer: int, n: int, C: int) -> None:
        """Causal attention of C new queries over N = n + C keys, one K/V group at a time."""
        cfg = self.cfg
        G, hd, N = cfg.group_size, cfg.head_dim, n + C
        q3 = v.p_q[: C * G].reshape(C, G, hd)
        scores = v.p_scores[: C * G * N].reshape(C * G, N)
        attn = v.p_attn[:C].reshape(C, cfg.n_heads, hd)
        for g in range(cfg.n_kv_heads):
            cols = slice(g * hd, (g + 1) * hd)
            q_cols = v.p_qkv[:C, g * G * hd : (g + 1) * G * hd].reshape(C, G, hd)
            np.multiply(q_cols, self.q_scale, out=q3)
            np.matmul(v.p_q[: C * G], v.k_cache[layer, :N, cols].T, out=scores)
            new = scores.reshape(C, G, N)[:, :, n:]
            np.add(new, v.p_causal[:C, None, :C], out=new)
            # Unnormalised softmax: the 1/row_sum scaling is applied to the (C*G, hd) output
            # and folded into the mass reduction, sparing a pass over the (C*G, N) scores.
            inv_sum = v.p_row_sum[: C * G]
            exp_rows(scores, v.p_row_max[: C * G], inv_sum)
            np.matmul(inv_sum, scores, out=v.mass_step[:N])
            np.add(v.mass[:N], v.mass_step[:N], out=v.mass[:N])
            out = v.p_o[: C * G]
            np.matmul(scores, v.v_cache[layer, :N, cols], out=out)
            np.multiply(out, inv_sum[:, None], out=out)
            attn[:, g * G : (g + 1) * G, :] = out.reshape(C, G, hd)

    def project_logits(self, hidden: np.ndarray, out: np.ndarray) -> None:
        """out (R, vocab) = logits of final-normed hidden rows (R, d_model) (perplexity)."""
        np.matmul(hidden, self.w.output.T, out=out)

    # -- decode -----------------------------------------------------------------------------
    def decode_one_token(self, token: int) -> np.ndarray:
        """Ingest one token and return the next-token logits (an arena view)."""
        span = self.ring.reserve(1)
        v = self.ring.arena.views().check()
        cfg, w = self.cfg, self.w
        n, N = span.start, span.start + 1
        H, KVH, G, hd = cfg.n_heads, cfg.n_kv_heads, cfg.group_size, cfg.head_dim
        qd, kvd, F = cfg.q_dim, cfg.kv_dim, cfg.ffn_dim
        x, xn, qkv = v.x, v.xn, v.qkv
        np.copyto(x, w.token_embd[token])
        mass, mass_step = v.mass[:N], v.mass_step[:N]
        mass[:] = 0.0
        cos, sin = self.rope.cos[span.pos], self.rope.sin[span.pos]
        qk = qkv[: qd + kvd].reshape(H + KVH, hd)
        rope_a = v.rope_a.reshape(H + KVH, hd // 2)
        rope_b = v.rope_b.reshape(H + KVH, hd // 2)
        q = qkv[:qd]
        q3 = q.reshape(KVH, G, hd)
        scores = v.scores[: H * N].reshape(KVH, G, N)
        scores2 = scores.reshape(H, N)
        attn3 = v.attn.reshape(KVH, G, hd)
        row_max, row_sum = v.row_max, v.row_sum
        qk_norm = v.qk_norm if cfg.arch.qk_norm else None
        for layer, lw in enumerate(w.layers):
            rmsnorm(x, lw.attn_norm, xn, cfg.rms_eps)
            np.dot(lw.wqkv, xn, out=qkv)
            self._shape_qk(lw, qkv, qk_norm)
            self.rope.rotate(qk, cos, sin, rope_a, rope_b)
            v.k_cache[layer, n] = qkv[qd : qd + kvd]
            v.v_cache[layer, n] = qkv[qd + kvd :]
            np.multiply(q, self.q_scale, out=q)
            keys = v.k_cache[layer, :N].reshape(N, KVH, hd).transpose(1, 2, 0)  # (KVH, hd, N)
            np.matmul(q3, keys, out=scores)
            softmax_few_rows(scores2, row_max, row_sum)
            np.sum(scores2, axis=0, out=mass_step)
            np.add(mass, mass_step, out=mass)
            values = v.v_cache[layer, :N].reshape(N, KVH, hd).transpose(1, 0, 2)  # (KVH, N, hd)
            np.matmul(scores, values, out=attn3)
            np.dot(lw.wo, v.attn, out=v.proj)
            np.add(x, v.proj, out=x)
            rmsnorm(x, lw.ffn_norm, xn, cfg.rms_eps)
            np.dot(lw.w_gate_up, xn, out=v.gate_up)
            silu_mul(v.gate_up[:F], v.gate_up[F:], v.ffn)
            np.dot(lw.w_down, v.ffn, out=v.proj)
            np.add(x, v.proj, out=x)
        rmsnorm(x, w.output_norm, xn, cfg.rms_eps)
        np.dot(w.output, xn, out=v.logits)
        self.ring.commit(span, v.mass)
        return v.logits
