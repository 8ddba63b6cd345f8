"""DELTA layers (Qwen3.5's gated delta net) as graph.py's builder emits them.

engine/model/delta_net.py says what each tensor is and engine/backends/numpy/delta.py is the
reference. Here q | k | v go through ggml_ssm_conv over the layer's carry (as LFM2's short
convolution does: the carry read, then its newest taps - 1 rows written back), and the delta
rule through ggml_gated_delta_net, which scales q by 1/sqrt(head) itself, reads key head
h % k_heads for value head h (the GGUF's tiled order) and keeps each head's state transposed,
as the arena's delta_state plane does. Its result holds every token's output, then the new
state, which is copied back into the plane after the op has read it (the copy depends on it).
"""

from __future__ import annotations

L2_EPS = 1e-6  # as numpy/delta.py (ggml divides by max(norm, eps); both are ~exact here)


class DeltaBlocks:
    """A mixin of graph.py's _Builder: it supplies g, ctx, cfg, arena, emit, norm and
    matmul."""

    def delta_net(self, plane: int, lw, x, n_q: int):
        g, ctx, cfg = self.g, self.ctx, self.cfg
        nk, nv, hd = cfg.delta_k_heads, cfg.delta_v_heads, cfg.delta_head_dim
        conv_dim, inner = cfg.delta_conv_dim, cfg.delta_inner
        h = self.norm(x, lw.attn_norm)
        qkv = self.matmul(lw.ssm_qkv, h)  # (n_q, conv_dim)
        z = self.matmul(lw.ssm_z, h)  # (n_q, inner)
        # beta and alpha (one row per value head) in f32: alpha sets each head's decay through
        # an exponential, and 8-bit rounding of h there moved the fixture's logits by 3.8% of
        # the peak against transformers (2.4% with these two exact; cheap: v_heads rows).
        beta = g.ggml_sigmoid(ctx, self.matmul(lw.ssm_beta, h, exact=True))  # (n_q, v_heads)
        alpha = self.matmul(lw.ssm_alpha, h, exact=True)
        decay = g.ggml_softplus(ctx, g.ggml_add(ctx, alpha, lw.ssm_dt))
        decay = g.ggml_mul(ctx, decay, lw.ssm_a)  # log of each head's decay

        # The convolution over the carry, time fastest: (conv_dim, K + n_q), carry first.
        carry = self.arena.delta_conv[plane]  # (K, conv_dim)
        K = carry.contents.ne[1]
        series = g.ggml_concat(ctx, g.ggml_cont(ctx, g.ggml_transpose(ctx, carry)),
                               g.ggml_cont(ctx, g.ggml_transpose(ctx, qkv)), 0)
        taps = lw.ssm_conv  # ssm_conv reads f32 taps only; converters write them so
        if taps.contents.type != g.GGML_TYPE_F32:
            taps = g.ggml_cast(ctx, taps, g.GGML_TYPE_F32)
        conv = g.ggml_ssm_conv(ctx, g.ggml_reshape_3d(ctx, series, K + n_q, conv_dim, 1),
                               taps)  # (1, n_q, conv_dim)
        conv = g.ggml_silu(ctx, g.ggml_reshape_2d(ctx, conv, conv_dim, n_q))
        item = series.contents.nb[0]
        newest = g.ggml_view_2d(ctx, series, K, conv_dim, series.contents.nb[1], n_q * item)
        self.emit(g.ggml_cpy(ctx, g.ggml_transpose(ctx, newest), carry))

        row, item = conv.contents.nb[1], conv.contents.nb[0]
        q, k = (g.ggml_l2_norm(ctx, g.ggml_view_3d(ctx, conv, hd, nk, n_q, hd * item, row,
                                                   part * nk * hd * item), L2_EPS)
                for part in (0, 1))
        v = g.ggml_cont(ctx, g.ggml_view_3d(ctx, conv, hd, nv, n_q, hd * item, row,
                                            2 * nk * hd * item))
        state = self.arena.delta_state[plane]  # (1, v_heads, head, head)
        heads = [g.ggml_reshape_4d(ctx, t, width, count, n_q, 1) for t, width, count in (
            (q, hd, nk), (k, hd, nk), (v, hd, nv), (decay, 1, nv), (beta, 1, nv))]
        result = g.ggml_gated_delta_net(ctx, *heads, state, 1)
        ritem = result.contents.nb[0]
        new_state = g.ggml_view_1d(ctx, result, hd * hd * nv, inner * n_q * ritem)
        self.emit(g.ggml_cpy(ctx, new_state, g.ggml_reshape_1d(ctx, state, hd * hd * nv)))

        # Gated RMSNorm per head, then the output projection.
        out = g.ggml_view_3d(ctx, result, hd, nv, n_q, hd * ritem, inner * ritem, 0)
        out = self.norm(out, lw.ssm_norm)
        out = g.ggml_mul(ctx, out, g.ggml_silu(ctx, g.ggml_reshape_3d(ctx, z, hd, nv, n_q)))
        return self.matmul(lw.ssm_out, g.ggml_reshape_2d(ctx, g.ggml_cont(ctx, out), inner, n_q))
