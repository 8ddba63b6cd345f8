"""Grouped-query attention as graph.py's builder emits it, over the ring's K/V plane (FULL
layers) or a window plane (hybrid_blocks.py): the G query heads that share a K/V head become
rows of one product, so each key is read once per layer."""

from __future__ import annotations

import numpy as np

# A decode step's Q.K product runs one tinyBLAS call per K/V head over that head's slice of
# every slot row. With 64-wide heads the slices are short strided reads, and the product ran
# at a fifth of the memory's speed. Taking B heads per call, each query padded with zeros to
# the B heads' width, reads B times longer slices for B times the multiplies; measured cold
# at 4096 slots on two Zen 4 cores: 3 K/V heads of 64 taken together, 310 -> 223 us a layer;
# 8 heads of 64 in pairs, 795 -> 450 us; 2 heads of 64, 386 -> 324 us. 128-wide heads or
# wider gained nothing, nor did heads that one query each reads (no GQA: 32 heads of 64 at
# G = 1 ran at 1228 us a layer per head, 1335 in pairs). The padding adds exact zeros, so
# the scores are bit-identical.
GROUPED_ROW = 128  # elements of a slot row that one call's slices should reach
MAX_GROUP = 4  # at most this many heads per call (B - 1 of each B multiplies are by zero)


def key_group(head_dim: int, n_kv_heads: int, group_size: int) -> int:
    """How many K/V heads one decode Q.K call takes together (1: one call per head), for
    heads `head_dim` wide that `group_size` query heads each read."""
    if head_dim >= GROUPED_ROW or group_size < 2:
        return 1
    for heads in range(2, min(n_kv_heads, MAX_GROUP) + 1):
        if n_kv_heads % heads == 0 and heads * head_dim >= GROUPED_ROW:
            return heads
    return 1


def query_blocks(head_dim: int, n_kv_heads: int, group_size: int, heads: int) -> np.ndarray:
    """The 0/1 pattern that places each query of a group of `heads` K/V heads in its own
    head's block: (groups, heads * G, heads, head_dim), 1 where query row j of a group meets
    head j // G."""
    rows = heads * group_size
    blocks = np.zeros((n_kv_heads // heads, rows, heads, head_dim), np.float32)
    blocks[:, np.arange(rows), np.arange(rows) // group_size, :] = 1.0
    return blocks


class Attend:
    """A mixin of graph.py's _Builder: it supplies g, ctx, cfg, arena, inputs, ones,
    value_slots, emit, norm, rope, project_qkv, store_values, matmul, query_gate and
    key_heads (the K/V heads a decode graph's Q.K products take together: key_group,
    decided at build)."""

    def attention(self, plane: int, lw, x, positions, slots, masks, blocks):
        """A FULL layer: the new rows go to their ring slots, then each block of queries
        attends over its first n_kv slots under its mask; returns the projected output and
        each block's attention mass per slot in this layer."""
        g, ctx, cfg = self.g, self.ctx, self.cfg
        n_q = sum(rows for rows, _ in blocks)
        q, k, v = self.project_qkv(lw, self.norm(x, lw.attn_norm), n_q)
        q, k = self.rope(q, positions), self.rope(k, positions)
        k_cache, v_cache = self.arena.k_cache[plane], self.arena.v_cache[plane]
        # Scatter the new rows into their slots first; graph order makes the reads below see them.
        self.emit(g.ggml_set_rows(ctx, k_cache, g.ggml_reshape_2d(ctx, k, cfg.kv_dim, n_q),
                                  slots))
        self.emit(self.store_values(v_cache, v, slots, self.value_slots))
        outs, layer_masses, first = [], [], 0
        for mask, (rows, n_kv) in zip(masks, blocks):
            block_q = q if rows == n_q else g.ggml_view_3d(  # rows [first, first + rows)
                ctx, q, cfg.head_dim, cfg.n_heads, rows, q.contents.nb[1], q.contents.nb[2],
                first * q.contents.nb[2])
            out, probs = self.attend(block_q, k_cache, v_cache, mask, rows, n_kv,
                                     values_by_dimension=self.value_slots is not None)
            # Attention mass per slot: out_prod sums over its second dimension, here each
            # K/V head's (query head, query) rows of the probabilities against ones; one output
            # row per K/V head, so the threads share the work. build() sums the K/V heads.
            ones = self.ones if rows * cfg.group_size == self.ones.contents.ne[1] else (
                g.ggml_view_3d(ctx, self.ones, 1, rows * cfg.group_size, cfg.n_kv_heads,
                               self.ones.contents.nb[1], self.ones.contents.nb[2], 0))
            layer_mass = g.ggml_out_prod(ctx, probs, ones)  # (KVH, 1, n_kv)
            # Both readers of the probabilities placed now, block by block: left to the
            # final sum's turn, every layer's (G*n_q, n_kv) probabilities stayed allocated
            # until the end of the graph (1 GB for a 256-token chunk at 4000 slots on the
            # shipped model), and a group's blocks' all at once.
            self.emit(out)
            self.emit(layer_mass)
            layer_masses.append(layer_mass)
            outs.append(out)
            first += rows
        out = outs[0]
        for block_out in outs[1:]:  # (n_q, q_dim), the blocks' rows in order
            out = g.ggml_concat(ctx, out, block_out, 1)
        if self.query_gate is not None:  # Qwen3.5: the output times sigmoid(gate)
            out = g.ggml_mul(ctx, out, g.ggml_sigmoid(ctx, self.query_gate))
        return self.matmul(lw.wo, out), layer_masses

    def attend(self, q, k_cache, v_cache, mask, n_q: int, n_kv: int, *,
               values_by_dimension: bool = False):
        """Grouped-query attention of q (n_q, H, hd) over the first n_kv rows of k_cache and
        v_cache ((rows, kv_dim) each; v_cache (kv_dim, rows) where `values_by_dimension`)
        under `mask` (n_q, n_kv): the output (n_q, q_dim) and the probabilities
        (KVH, G*n_q, n_kv), each K/V head's rows query head by query head."""
        g, ctx, cfg = self.g, self.ctx, self.cfg
        hd, KVH, G = cfg.head_dim, cfg.n_kv_heads, cfg.group_size
        if n_q == 1 and self.key_heads > 1:
            scores = self.grouped_scores(q, k_cache, n_kv, self.key_heads)
        else:
            scores = self.scores(q, k_cache, n_q, n_kv)  # (KVH, G*n_q, n_kv)
        # Seen as (KVH, G, n_q, n_kv), one mask row per query serves every head
        scores = g.ggml_reshape_4d(ctx, scores, n_kv, n_q, G, KVH)
        probs = g.ggml_soft_max_ext(ctx, scores, mask, cfg.q_scale, 0.0)
        probs = g.ggml_reshape_3d(ctx, probs, n_kv, G * n_q, KVH)
        if values_by_dimension:
            # Each head's hd rows of n_kv values are contiguous: one product contracts them
            # with the probabilities, reading every value once, no copy.
            row = v_cache.contents.nb[1]
            values_t = g.ggml_view_3d(ctx, v_cache, n_kv, hd, KVH, row, hd * row, 0)
            out = g.ggml_mul_mat(ctx, values_t, probs)  # (KVH, G*n_q, hd)
            return self.by_query(out, n_q), probs
        values = g.ggml_view_3d(ctx, v_cache, hd, KVH, n_kv, hd * 4, v_cache.contents.nb[1], 0)
        if n_q == 1:
            # Decode: contract over slots in place (out_prod sums over dimension 1), so the
            # values are read once rather than transposed into a copy first.
            out = g.ggml_out_prod(ctx, g.ggml_permute(ctx, values, 0, 2, 1, 3),  # (KVH, n_kv, hd)
                                  g.ggml_permute(ctx, probs, 1, 0, 2, 3))  # (KVH, n_kv, G)
            # out: (KVH, G, hd), which is (H, hd) in query-head order
            return g.ggml_reshape_2d(ctx, out, cfg.q_dim, n_q), probs
        values_t = g.ggml_cont(ctx, g.ggml_permute(ctx, values, 1, 2, 0, 3))  # (KVH, hd, n_kv)
        out = g.ggml_mul_mat(ctx, values_t, probs)  # (KVH, G*n_q, hd)
        return self.by_query(out, n_q), probs

    def by_query(self, out, n_q: int):
        """(KVH, G*n_q, hd) -> (n_q, q_dim): each query's heads in query-head order."""
        g, ctx, cfg = self.g, self.ctx, self.cfg
        if n_q > 1:
            out = g.ggml_reshape_4d(ctx, out, cfg.head_dim, n_q, cfg.group_size,
                                    cfg.n_kv_heads)
            out = g.ggml_cont(ctx, g.ggml_permute(ctx, out, 0, 3, 1, 2))  # (n_q, KVH, G, hd)
        return g.ggml_reshape_2d(ctx, out, cfg.q_dim, n_q)

    def scores(self, q, k_cache, n_q: int, n_kv: int):
        """Each query's dot with every key, one product per K/V head: (KVH, G*n_q, n_kv)."""
        g, ctx, cfg = self.g, self.ctx, self.cfg
        hd, KVH, G = cfg.head_dim, cfg.n_kv_heads, cfg.group_size
        k_item, k_row = k_cache.contents.nb[0], k_cache.contents.nb[1]
        keys = g.ggml_view_3d(ctx, k_cache, hd, KVH, n_kv, hd * k_item, k_row, 0)  # (n_kv, KVH, hd)
        keys = g.ggml_permute(ctx, keys, 0, 2, 1, 3)  # (KVH, n_kv, hd)
        # The G query heads that share a K/V head become rows of one product, so each key is
        # read from memory once per layer, not once per query head.
        if n_q == 1:
            queries = g.ggml_reshape_3d(ctx, q, hd, G, KVH)  # (KVH, G, hd)
        else:
            queries = g.ggml_reshape_4d(ctx, q, hd, G, KVH, n_q)  # (n_q, KVH, G, hd)
            queries = g.ggml_cont(ctx, g.ggml_permute(ctx, queries, 0, 2, 3, 1))
            queries = g.ggml_reshape_3d(ctx, queries, hd, G * n_q, KVH)  # (KVH, G*n_q, hd)
        return g.ggml_mul_mat(ctx, keys, queries)

    def grouped_scores(self, q, k_cache, n_kv: int, heads: int):
        """scores() for one token, each product taking `heads` K/V heads (key_group)."""
        g, ctx, cfg = self.g, self.ctx, self.cfg
        hd, KVH, G = cfg.head_dim, cfg.n_kv_heads, cfg.group_size
        width, groups = heads * hd, KVH // heads
        keys = g.ggml_view_3d(ctx, k_cache, width, n_kv, groups, k_cache.contents.nb[1],
                              width * k_cache.contents.nb[0], 0)  # (groups, n_kv, width)
        queries = g.ggml_reshape_4d(ctx, q, hd, 1, heads * G, groups)  # (groups, heads*G, 1, hd)
        # Broadcast over the heads, zeros outside each query's own: (groups, heads*G, width)
        queries = g.ggml_mul(ctx, self.inputs["query_blocks"], queries)
        queries = g.ggml_reshape_3d(ctx, queries, width, heads * G, groups)
        scores = g.ggml_mul_mat(ctx, keys, queries)  # (groups, heads*G, n_kv)
        return g.ggml_reshape_3d(ctx, scores, n_kv, G, KVH)  # (KVH, G, n_kv)
