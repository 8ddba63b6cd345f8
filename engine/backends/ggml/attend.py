"""Grouped-query attention as graph.py's builder emits it, over the ring's K/V plane (FULL
layers) or a window plane (hybrid_blocks.py): the G query heads that share a K/V head become
rows of one product, so each key is read once per layer."""

from __future__ import annotations


class Attend:
    """A mixin of graph.py's _Builder: it supplies g, ctx and cfg."""

    def attend(self, q, k_source, v_source, mask, n_q: int, n_kv: int, *,
               values_by_dimension: bool = False):
        """Grouped-query attention of q (n_q, H, hd) over the first n_kv rows of k_source and
        v_source ((rows, kv_dim) each; v_source (kv_dim, rows) where `values_by_dimension`):
        the output (n_q, q_dim) and the probabilities."""
        g, ctx, cfg = self.g, self.ctx, self.cfg
        hd, KVH, G = cfg.head_dim, cfg.n_kv_heads, cfg.group_size
        k_cache, v_cache = k_source, v_source
        k_item, k_row = k_cache.contents.nb[0], k_cache.contents.nb[1]
        keys = g.ggml_view_3d(ctx, k_cache, hd, KVH, n_kv, hd * k_item, k_row, 0)  # (n_kv, KVH, hd)
        keys = g.ggml_permute(ctx, keys, 0, 2, 1, 3)  # (KVH, n_kv, hd)
        # The G query heads that share a K/V head become rows of one product, so each key is
        # read from memory once per layer, not once per query head.
        if n_q == 1:
            queries = g.ggml_reshape_3d(ctx, q, hd, G, KVH)  # (KVH, G, hd)
        else:
            queries = g.ggml_reshape_4d(ctx, q, hd, G, KVH, n_q)  # (n_q, KVH, G, hd)
            queries = g.ggml_cont(ctx, g.ggml_permute(ctx, queries, 0, 1, 3, 2))
            queries = g.ggml_reshape_3d(ctx, queries, hd, G * n_q, KVH)  # (KVH, n_q*G, hd)
        scores = g.ggml_mul_mat(ctx, keys, queries)  # (KVH, n_q*G, n_kv)
        probs = g.ggml_soft_max_ext(ctx, scores, mask, cfg.q_scale, 0.0)
        if values_by_dimension:
            # Each head's hd rows of n_kv values are contiguous: one product contracts them
            # with the probabilities, reading every value once, no copy.
            row = v_cache.contents.nb[1]
            values_t = g.ggml_view_3d(ctx, v_cache, n_kv, hd, KVH, row, hd * row, 0)
            out = g.ggml_mul_mat(ctx, values_t, probs)  # (KVH, n_q*G, hd)
            if n_q > 1:
                out = g.ggml_reshape_4d(ctx, out, hd, G, n_q, KVH)
                out = g.ggml_cont(ctx, g.ggml_permute(ctx, out, 0, 1, 3, 2))  # (n_q, KVH, G, hd)
            return g.ggml_reshape_2d(ctx, out, cfg.q_dim, n_q), probs
        values = g.ggml_view_3d(ctx, v_cache, hd, KVH, n_kv, hd * 4, v_cache.contents.nb[1], 0)
        if n_q == 1:
            # Decode: contract over slots in place (out_prod sums over dimension 1), so the
            # values are read once rather than transposed into a copy first.
            out = g.ggml_out_prod(ctx, g.ggml_permute(ctx, values, 0, 2, 1, 3),  # (KVH, n_kv, hd)
                                  g.ggml_permute(ctx, probs, 1, 0, 2, 3))  # (KVH, n_kv, G)
            # out: (KVH, G, hd), which is (H, hd) in query-head order
        else:
            values_t = g.ggml_cont(ctx, g.ggml_permute(ctx, values, 1, 2, 0, 3))  # (KVH, hd, n_kv)
            out = g.ggml_mul_mat(ctx, values_t, probs)  # (KVH, n_q*G, hd)
            out = g.ggml_reshape_4d(ctx, out, hd, G, n_q, KVH)
            out = g.ggml_cont(ctx, g.ggml_permute(ctx, out, 0, 1, 3, 2))  # (n_q, KVH, G, hd)
        return g.ggml_reshape_2d(ctx, out, cfg.q_dim, n_q), probs
