"""The blocks of a hybrid model's layers outside the ring, as graph.py's builder emits them.

Gemma 3's WINDOW layers attend over their own circular planes (engine/backends/numpy/window.py
has the rules, engine/backends/window_mask.py the masks); LFM2's CONV layers run a short
convolution over their carry (engine/backends/numpy/shortconv.py). Both read their plane
before they write it: the graph's node order makes it so.
"""

from __future__ import annotations


class HybridBlocks:
    """A mixin of graph.py's _Builder: it supplies g, ctx, cfg, arena, window_inputs,
    window_value_slots, window_rows, emit, store_values, norm, rope, project_qkv, matmul and
    attend."""

    def window_attention(self, plane: int, lw, x, positions, n_q: int):
        """A WINDOW layer over its circular plane (numpy/window.py has the rules). Decode
        writes its row first and attends the plane's rows; a prefill chunk attends the
        plane's old rows and its own keys, and only then writes its newest rows."""
        g, ctx, cfg = self.g, self.ctx, self.cfg
        wslots, wmask = self.window_inputs
        q, k, v = self.project_qkv(lw, self.norm(x, lw.attn_norm), n_q)
        q, k = self.rope(q, positions, window=True), self.rope(k, positions, window=True)
        kw, vw = self.arena.kw_cache[plane], self.arena.vw_cache[plane]
        k = g.ggml_reshape_2d(ctx, k, cfg.kv_dim, n_q)
        kept = min(n_q, cfg.window)  # a chunk longer than the window keeps its newest rows
        rows = self.last_rows(wslots, kept, flat=True)
        by_dimension = self.window_value_slots is not None  # as the ring's values (graph.py)
        stores = (g.ggml_set_rows(ctx, kw, self.last_rows(k, kept), rows),
                  self.store_values(vw, self.last_rows(v, kept), rows, self.window_value_slots))
        if n_q == 1:
            for store in stores:
                self.emit(store)
            keys, values, n_keys = kw, vw, self.window_rows
        else:
            keys = g.ggml_concat(ctx, kw, g.ggml_cast(ctx, k, kw.contents.type), 1)
            if by_dimension:  # the plane's rows of slots, then the chunk's own, per dimension
                own = g.ggml_cast(ctx, g.ggml_transpose(ctx, v), vw.contents.type)
                values = g.ggml_concat(ctx, vw, own, 0)
            else:
                values = g.ggml_concat(ctx, vw, v, 1)
            n_keys = cfg.window + n_q
        out, _ = self.attend(q, keys, values, wmask, n_q, n_keys,
                             values_by_dimension=by_dimension)
        out = self.matmul(lw.wo, out)
        if n_q > 1:
            self.emit(out)  # every read of the old rows comes before they are overwritten
            for store in stores:
                self.emit(store)
        return out

    def short_conv(self, plane: int, lw, x, n_q: int):
        """A CONV layer (LFM2; numpy/shortconv.py has the rules): in_proj gives B, C and x;
        B*x after the layer's carry goes through the depthwise causal convolution
        (ssm_conv), C times that through out_proj; the last taps - 1 rows of B*x become the
        carry, written after every read of the old one."""
        g, ctx, d = self.g, self.ctx, self.cfg.d_model
        bcx = self.matmul(lw.conv_in, self.norm(x, lw.attn_norm))  # (n_q, 3d)
        row, item = bcx.contents.nb[1], bcx.contents.nb[0]
        b, c, xs = (g.ggml_view_2d(ctx, bcx, d, n_q, row, part * d * item) for part in range(3))
        carry = self.arena.conv_state[plane]  # (K, d)
        K = carry.contents.ne[1]
        # ssm_conv wants time fastest: (d, K + n_q) in numpy's order, carry first.
        series = g.ggml_concat(ctx, g.ggml_cont(ctx, g.ggml_transpose(ctx, carry)),
                               g.ggml_cont(ctx, g.ggml_transpose(ctx, g.ggml_mul(ctx, b, xs))),
                               0)
        conv = g.ggml_ssm_conv(ctx, g.ggml_reshape_3d(ctx, series, K + n_q, d, 1),
                               lw.conv_kernel)  # (1, n_q, d)
        y = g.ggml_mul(ctx, g.ggml_cont(ctx, c), g.ggml_reshape_2d(ctx, conv, d, n_q))
        out = self.matmul(lw.conv_out, y)
        newest = g.ggml_view_2d(ctx, series, K, d, series.contents.nb[1], n_q * item)
        self.emit(g.ggml_cpy(ctx, g.ggml_transpose(ctx, newest), carry))
        return out

    def last_rows(self, t, count: int, *, flat: bool = False):
        """The last `count` rows (ne[1]) of t, or with `flat` its last `count` elements."""
        g, c = self.g, t.contents
        if flat:
            return g.ggml_view_1d(self.ctx, t, count, (c.ne[0] - count) * c.nb[0])
        return g.ggml_view_2d(self.ctx, t, c.ne[0], count, c.nb[1], (c.ne[1] - count) * c.nb[1])
