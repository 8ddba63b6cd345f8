"""The numpy forward pass: batched prefill and single-token decode over the K/V ring.

This is the reference every architecture is checked against, so the model reads top to bottom
in one place: `_layer` is the transformer block, and both phases run it, on the rows of a
prefill chunk (C, d_model) or on the one row of a decode step (d_model,). They differ only in
how attention is computed over the ring (`_prefill_attention`, `_decode_attention`), and over
a WINDOW layer's own window (window.py). A CONV layer (LFM2) runs its short convolution in
attention's place (shortconv.py), a DELTA layer (Qwen3.5) its gated delta net (delta.py).

Both passes write only into arena scratch views (`out=` everywhere), so after a conversation
is ready a decode step allocates no numpy buffers. Scalars are Python floats: an np.float64
scalar would silently promote the f32 pipeline to f64 and make decode ~15x slower.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from ...model.architecture import CONV, DELTA, WINDOW
from ...model.weights import Weights
from ...state.arena import ArenaViews
from ...state.ring import KVRing, SlotSpan
from ..base import ForwardPass, HiddenCallback, ProgressCallback, prefill_in_chunks
from ..window_mask import window_mask
from .delta import delta_net
from .ops import gelu_mul, rmsnorm, rmsnorm_heads, rmsnorm_rows, sigmoid_mul, silu_mul
from .shortconv import short_conv
from .softmax import exp_rows, softmax_few_rows
from .window import decode_window_attention, prefill_window_attention


@dataclass(frozen=True)
class Rows:
    """One phase's scratch views: R rows (a prefill chunk) or one row (decode, no row axis).
    Each field's shape is given for the prefill case; decode's drops the leading R."""

    x: np.ndarray  # (R, d) residual stream, updated in place layer by layer
    xn: np.ndarray  # (R, d) normed residual
    norm_tmp: np.ndarray | None  # (R,) per-row inverse RMS; None for one row
    qkv: np.ndarray  # (R, qkv_dim) q | k | v, then the query gate (gated queries)
    qk: np.ndarray  # (R, H + KVH, hd) view of qkv's q and k heads, which RoPE rotates
    qk_norm: np.ndarray | None  # (R, H + KVH) QK-norm scratch, if the model has it
    cos: np.ndarray  # broadcastable to (R, H + KVH, hd/2)
    sin: np.ndarray
    cos_w: np.ndarray  # the same for WINDOW layers' RoPE (the ring's where they share it)
    sin_w: np.ndarray
    rope_a: np.ndarray  # (R, H + KVH, hd/2)
    rope_b: np.ndarray
    attn: np.ndarray  # (R, q_dim) attention output, written by the phase's attention
    proj: np.ndarray  # (R, d)
    gate_up: np.ndarray  # (R, 2F) gate | up
    ffn: np.ndarray  # (R, F)
    bcx: np.ndarray | None  # (R, 3d) a CONV layer's B | C | x, where the model has them
    conv_win: np.ndarray | None  # (K + R, d) the conv's carry, then the rows' B*x


# Attention of the phase's rows into Rows.attn: (plane, is a WINDOW layer); a FULL layer's
# plane is its K/V plane in the ring, already holding the rows' keys.
Attention = Callable[[int, bool], None]


class Forward(ForwardPass):
    """Runs prefill and decode for one conversation against the shared weights."""

    projects_hidden = True

    def __init__(self, weights: Weights, ring: KVRing):
        self.w = weights
        self.ring = ring
        self.cfg = ring.cfg
        self.rope = ring.rope
        self.rope_w = ring.window_rope
        self.q_scale = self.cfg.q_scale
        arch = self.cfg.arch
        # HF casts sqrt(d_model) to the weights' dtype before scaling; so does this.
        self.embed_scale = float(np.float32(math.sqrt(self.cfg.d_model))) \
            if arch.embed_scale else None
        self.gate = gelu_mul if arch.geglu else silu_mul
        self.kinds = self.cfg.kinds
        self.planes = tuple(self.cfg.plane(i) for i in range(self.cfg.n_layers))

    def _rope_rows(self, v: ArenaViews, pos: int, count: int) -> tuple[np.ndarray, ...]:
        """(count, hd/2) cos, sin of positions pos.., then the WINDOW layers' (the same rows
        where the model has none), computed into the arena's scratch."""
        scratch = v.p_rope_pos[:count], v.p_rope_angle[:count]
        cos, sin = v.p_cos[:count], v.p_sin[:count]
        self.rope.fill_rows(pos, cos, sin, *scratch)
        if not self.cfg.window:
            return cos, sin, cos, sin
        cos_w, sin_w = v.p_cos_w[:count], v.p_sin_w[:count]
        self.rope_w.fill_rows(pos, cos_w, sin_w, *scratch)
        return cos, sin, cos_w, sin_w

    # -- the model ---------------------------------------------------------------------------
    def _layer(self, i: int, r: Rows, n: int, attend: Attention) -> None:
        """Transformer block i on the rows r.x, in place (pre-norm operator and gated
        feed-forward, a residual add after each). The operator is attention, or a CONV
        layer's short convolution, which carries its last inputs in its conv_state plane."""
        lw, F, plane = self.w.layers[i], self.cfg.ffn_dim, self.planes[i]
        self._norm(r.x, lw.attn_norm, r.xn, r.norm_tmp)
        if self.kinds[i] == CONV:
            carry = self.ring.arena.views().conv_state[plane]
            short_conv(lw, r.xn, carry, r.bcx, r.conv_win, r.proj)
        elif self.kinds[i] == DELTA:
            v = self.ring.arena.views()
            delta_net(lw, self.cfg, r.xn, v.delta_conv[plane], v.delta_state[plane], v, r.proj)
        else:
            self._attention(lw, r, n, plane, self.kinds[i] == WINDOW, attend)
        self._add_residual(r, lw.post_attn_norm)
        self._norm(r.x, lw.ffn_norm, r.xn, r.norm_tmp)
        np.matmul(r.xn, lw.w_gate_up.T, out=r.gate_up)
        self.gate(r.gate_up[..., :F], r.gate_up[..., F:], r.ffn)
        np.matmul(r.ffn, lw.w_down.T, out=r.proj)
        self._add_residual(r, lw.post_ffn_norm)

    def _attention(self, lw, r: Rows, n: int, plane: int, windowed: bool,
                   attend: Attention) -> None:
        """Attention of the normed rows r.xn into r.proj: a FULL layer's keys and values go
        to ring slots n.. of its plane, a WINDOW layer's to its window (window.py)."""
        cfg, v = self.cfg, self.ring.arena.views()
        qd, kvd = cfg.q_dim, cfg.kv_dim
        np.matmul(r.xn, lw.wqkv.T, out=r.qkv)
        self._shape_qk(lw, r.qkv, r.qk_norm)
        if windowed:
            self.rope_w.rotate(r.qk, r.cos_w, r.sin_w, r.rope_a, r.rope_b)
        else:
            self.rope.rotate(r.qk, r.cos, r.sin, r.rope_a, r.rope_b)
            rows = 1 if r.qkv.ndim == 1 else r.qkv.shape[0]
            v.k_cache[plane, n : n + rows] = r.qkv[..., qd : qd + kvd]
            v.v_cache[plane, n : n + rows] = r.qkv[..., qd + kvd : qd + 2 * kvd]
        attend(plane, windowed)
        if cfg.arch.gated_query:  # attn *= sigmoid(gate); the gate sits after q | k | v
            sigmoid_mul(r.qkv[..., qd + 2 * kvd :], r.attn)
        np.matmul(r.attn, lw.wo.T, out=r.proj)

    def _add_residual(self, r: Rows, post_norm: np.ndarray | None) -> None:
        """r.x += r.proj, RMS-normed first where the architecture has post-norms (Gemma)."""
        if post_norm is None:
            np.add(r.x, r.proj, out=r.x)
        else:  # r.xn is free: the block's input norm has been consumed
            self._norm(r.proj, post_norm, r.xn, r.norm_tmp)
            np.add(r.x, r.xn, out=r.x)

    def _embed_scaled(self, x: np.ndarray) -> None:
        if self.embed_scale is not None:
            np.multiply(x, self.embed_scale, out=x)

    def _norm(self, x: np.ndarray, weight: np.ndarray, out: np.ndarray,
              tmp: np.ndarray | None) -> None:
        if tmp is None:
            rmsnorm(x, weight, out, self.cfg.rms_eps)
        else:
            rmsnorm_rows(x, weight, out, tmp, self.cfg.rms_eps)

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

    def project_logits(self, hidden: np.ndarray, out: np.ndarray) -> None:
        """out (R, vocab) = logits of final-normed hidden rows (R, d_model) (perplexity)."""
        np.matmul(hidden, self.w.output.T, out=out)

    # -- prefill ----------------------------------------------------------------------------
    def prefill(self, tokens: Sequence[int], *, anchors: bool = False,
                on_hidden: HiddenCallback | None = None,
                should_stop: Callable[[], bool] | None = None,
                on_progress: ProgressCallback | None = None) -> np.ndarray | None:
        """Ingest tokens in chunks; return the logits after the last one (an arena view), or
        None if `should_stop` said so between chunks."""

        def run(span: SlotSpan, chunk: Sequence[int], last: bool) -> None:
            self._prefill_chunk(self.ring.arena.views(), span, chunk, on_hidden, last)

        done = prefill_in_chunks(self.ring, tokens, self.ring.policy.prefill_chunk, run,
                                 anchors=anchors, should_stop=should_stop,
                                 on_progress=on_progress)
        return self.ring.arena.views().logits if done else None

    def _prefill_chunk(self, v: ArenaViews, span: SlotSpan, chunk: Sequence[int],
                       on_hidden: HiddenCallback | None, final_logits: bool) -> None:
        v.check()
        cfg, w = self.cfg, self.w
        C, n = len(chunk), span.start
        toks = v.p_tokens[:C]
        toks[:] = chunk
        cos, sin, cos_w, sin_w = (a[:, None, :] for a in self._rope_rows(v, span.pos, C))
        r = Rows(
            x=v.p_x[:C], xn=v.p_xn[:C], norm_tmp=v.p_norm[:C], qkv=v.p_qkv[:C],
            qk=v.p_qkv[:C, : cfg.q_dim + cfg.kv_dim].reshape(
                C, cfg.n_heads + cfg.n_kv_heads, cfg.head_dim),
            qk_norm=v.p_qk_norm[:C] if cfg.arch.qk_norm else None,
            cos=cos, sin=sin, cos_w=cos_w, sin_w=sin_w,
            rope_a=v.p_rope_a[:C], rope_b=v.p_rope_b[:C], attn=v.p_attn[:C],
            proj=v.p_proj[:C], gate_up=v.p_gate_up[:C], ffn=v.p_ffn[:C],
            bcx=v.p_bcx[:C] if CONV in self.kinds else None,
            conv_win=v.p_conv_win[: cfg.conv_kernel - 1 + C] if CONV in self.kinds else None)
        np.take(w.token_embd, toks, axis=0, out=r.x)
        self._embed_scaled(r.x)
        v.mass[: n + C] = 0.0
        before = self.ring.clock  # the clock of the token before the chunk
        if cfg.window:
            window_mask(v.p_wmask[: C * (cfg.window + C)].reshape(C, -1), before, cfg.window)
        attend = partial(self._prefill_attention, v, n, C, before)
        for i in range(cfg.n_layers):
            self._layer(i, r, n, attend)
        if on_hidden is not None:
            rmsnorm_rows(r.x, w.output_norm, r.xn, r.norm_tmp, cfg.rms_eps)
            on_hidden(r.xn)
        if final_logits:
            rmsnorm(r.x[C - 1], w.output_norm, v.xn, cfg.rms_eps)
            np.dot(w.output, v.xn, out=v.logits)

    def _prefill_attention(self, v: ArenaViews, n: int, C: int, before: int, plane: int,
                           windowed: bool) -> None:
        """Causal attention of C new queries over N = n + C keys, one K/V group at a time."""
        cfg = self.cfg
        if windowed:
            prefill_window_attention(v, cfg, self.q_scale, plane, C, before)
            return
        G, hd, N = cfg.group_size, cfg.head_dim, n + C
        q3 = v.p_q[: C * G].reshape(C, G, hd)
        scores = v.p_scores[: C * G * N].reshape(C * G, N)
        attn = v.p_attn[:C].reshape(C, cfg.n_heads, hd)
        for g in range(cfg.n_kv_heads):
            cols = slice(g * hd, (g + 1) * hd)
            q_cols = v.p_qkv[:C, g * G * hd : (g + 1) * G * hd].reshape(C, G, hd)
            np.multiply(q_cols, self.q_scale, out=q3)
            np.matmul(v.p_q[: C * G], v.k_cache[plane, :N, cols].T, out=scores)
            new = scores.reshape(C, G, N)[:, :, n:]
            np.add(new, v.p_causal[:C, None, :C], out=new)
            # Unnormalised softmax: the 1/row_sum scaling is applied to the (C*G, hd) output
            # and folded into the mass reduction, sparing a pass over the (C*G, N) scores.
            inv_sum = v.p_row_sum[: C * G]
            exp_rows(scores, v.p_row_max[: C * G], inv_sum)
            np.matmul(inv_sum, scores, out=v.mass_step[:N])
            np.add(v.mass[:N], v.mass_step[:N], out=v.mass[:N])
            out = v.p_o[: C * G]
            np.matmul(scores, v.v_cache[plane, :N, cols], out=out)
            np.multiply(out, inv_sum[:, None], out=out)
            attn[:, g * G : (g + 1) * G, :] = out.reshape(C, G, hd)

    # -- decode -----------------------------------------------------------------------------
    def decode_one_token(self, token: int) -> np.ndarray:
        """Ingest one token and return the next-token logits (an arena view)."""
        span = self.ring.reserve(1)
        v = self.ring.arena.views().check()
        cfg, w = self.cfg, self.w
        H, KVH, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        cos, sin, cos_w, sin_w = (a[0] for a in self._rope_rows(v, span.pos, 1))
        r = Rows(
            x=v.x, xn=v.xn, norm_tmp=None, qkv=v.qkv,
            qk=v.qkv[: cfg.q_dim + cfg.kv_dim].reshape(H + KVH, hd),
            qk_norm=v.qk_norm if cfg.arch.qk_norm else None,
            cos=cos, sin=sin, cos_w=cos_w, sin_w=sin_w,
            rope_a=v.rope_a.reshape(H + KVH, hd // 2), rope_b=v.rope_b.reshape(H + KVH, hd // 2),
            attn=v.attn, proj=v.proj, gate_up=v.gate_up, ffn=v.ffn,
            bcx=v.bcx if CONV in self.kinds else None,
            conv_win=v.conv_win if CONV in self.kinds else None)
        np.copyto(r.x, w.token_embd[token])
        self._embed_scaled(r.x)
        v.mass[: span.start + 1] = 0.0
        attend = partial(self._decode_attention, v, span.start, self.ring.clock + 1)
        for i in range(cfg.n_layers):
            self._layer(i, r, span.start, attend)
        rmsnorm(r.x, w.output_norm, r.xn, cfg.rms_eps)
        np.dot(w.output, r.xn, out=v.logits)
        self.ring.commit(span, v.mass)
        return v.logits

    def _decode_attention(self, v: ArenaViews, n: int, clock: int, plane: int,
                          windowed: bool) -> None:
        """The new token's query heads over the N = n + 1 keys, all K/V groups at once."""
        cfg = self.cfg
        if windowed:
            decode_window_attention(v, cfg, self.q_scale, plane, clock)
            return
        H, KVH, G, hd, N = cfg.n_heads, cfg.n_kv_heads, cfg.group_size, cfg.head_dim, n + 1
        q = v.qkv[: cfg.q_dim]
        np.multiply(q, self.q_scale, out=q)
        scores = v.scores[: H * N].reshape(KVH, G, N)
        keys = v.k_cache[plane, :N].reshape(N, KVH, hd).transpose(1, 2, 0)  # (KVH, hd, N)
        np.matmul(q.reshape(KVH, G, hd), keys, out=scores)
        softmax_few_rows(scores.reshape(H, N), v.row_max, v.row_sum)
        np.sum(scores.reshape(H, N), axis=0, out=v.mass_step[:N])
        np.add(v.mass[:N], v.mass_step[:N], out=v.mass[:N])
        values = v.v_cache[plane, :N].reshape(N, KVH, hd).transpose(1, 0, 2)  # (KVH, N, hd)
        np.matmul(scores, values, out=v.attn.reshape(KVH, G, hd))
