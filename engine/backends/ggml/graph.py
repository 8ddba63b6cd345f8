"""One forward step as a ggml graph: new tokens attending over the ring's first slots.

The graph reads the GGUF's quantized blocks (GgmlWeights) and the conversation's arena
(ArenaTensors) in place: new keys and values are scattered into their slots with set_rows,
the attention mass per slot is summed over the ring's layers, heads and queries into the
arena's `mass`, and the next-token logits land in the arena's `logits`. Inputs are small
tensors that the caller fills before each compute, so a decode graph is built once per
context bucket and then re-run for every token without touching Python-side ggml objects.

A hybrid model's WINDOW layers (Gemma 3) attend over their own circular planes instead of the
ring, with inputs of their own: the rows the new tokens take (`wslots`) and a mask over the
plane's rows (`wmask`), as engine/backends/numpy/window.py describes. CONV layers (LFM2) and
DELTA layers (Qwen3.5) read and write their carries and states in the arena's planes.

A graph's queries come in blocks, each attending the ring's first n_kv slots under its own
mask: one block for a decode step or a prefill chunk, several for a group of prefill chunks
(forward.py). Every other node takes all of a group's rows at once, so each quantized matrix
is expanded once per group rather than once per chunk; each block's attention, and so its
mass, is what its chunk alone would compute, and the blocks' masses are the graph's outputs
(`masses`) for the ring to commit chunk by chunk.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

from ...model.architecture import CONV, DELTA, FULL, INTERLEAVED, WINDOW
from ...model.config import ModelConfig
from .arena_tensors import ArenaTensors
from .attend import Attend, key_group
from .delta_block import DeltaBlocks
from .hybrid_blocks import HybridBlocks
from .lib import free_with, ggml
from .step_inputs import StepInputs, tensor_array
from .weights import GgmlWeights

# Room for a graph's nodes: at least GRAPH_NODES, and per layer NODES_PER_LAYER plus
# NODES_PER_BLOCK for each query block. The shipped model's layers take 55 nodes with one
# block and 130 with four; an 80-layer model's group of four would pass 8192.
GRAPH_NODES = 8192
NODES_PER_LAYER, NODES_PER_BLOCK = 64, 40


class StepGraph:
    """A built and allocated graph; GgmlBackend.run computes it on the filled inputs."""

    def __init__(self, weights: GgmlWeights, cfg: ModelConfig, arena: ArenaTensors,
                 blocks: Sequence[tuple[int, int]], *, hidden_rows: bool, dequantize: bool,
                 allocator, window_rows: int = 0) -> None:
        """`blocks`: (query rows, ring slots attended) of each block of the new tokens, in
        order. `window_rows`: how many of each window plane's first rows a one-token step
        attends (0: all of them); a young conversation has written only the first few."""
        g = ggml()
        if len(blocks) > 1 and WINDOW in cfg.kinds:  # window planes take one chunk at a time
            raise ValueError("a graph of several query blocks cannot have WINDOW layers")
        nodes = max(GRAPH_NODES,
                    cfg.n_layers * (NODES_PER_LAYER + NODES_PER_BLOCK * len(blocks)))
        self._ctx = g.ggml_init(g.ggml_init_params(
            mem_size=nodes * g.ggml_tensor_overhead()
            + g.ggml_graph_overhead_custom(nodes, False),
            no_alloc=True))
        self._free = free_with(self, self._ctx)
        self.graph = g.ggml_new_graph_custom(self._ctx, nodes, False)
        builder = _Builder(g, self._ctx, self.graph, weights, cfg, arena, dequantize,
                           window_rows or cfg.window)
        inputs = builder.build(blocks, hidden_rows=hidden_rows)
        if not g.ggml_gallocr_alloc_graph(allocator, self.graph):
            raise MemoryError(f"ggml could not allocate a graph for the query blocks {blocks}")
        self.inputs = StepInputs.of(inputs, cfg, blocks, arena.k_cache[0].contents.ne[1])
        # (n_kv,) each: the blocks' attention mass per slot, once computed (several blocks;
        # one block's goes to the arena's `mass`). Valid until close().
        self._mass_tensors = builder.masses

    def masses(self) -> list[np.ndarray]:
        """Copies of the blocks' masses after a compute (graphs of several blocks)."""
        return [tensor_array(t, np.float32).copy() for t in self._mass_tensors]

    def close(self) -> None:
        self._free()


class _Builder(Attend, HybridBlocks, DeltaBlocks):
    """Small blocks in the shape of the numpy forward pass, emitting ggml nodes.

    Shape comments are numpy-ordered (slowest dimension first); ggml's `ne` is the reverse.
    """

    def __init__(self, g, ctx, graph, weights: GgmlWeights, cfg: ModelConfig,
                 arena: ArenaTensors, dequantize: bool, window_rows: int):
        self.g, self.ctx, self.graph = g, ctx, graph
        self.window_rows = window_rows
        self.w, self.cfg, self.arena = weights, cfg, arena
        self.dequantize = dequantize
        self.inputs: dict[str, object] = {}
        self.query_gate = None  # set by project_qkv for a gated query

    def input(self, name: str, kind: int, *ne: int, constant: bool = False):
        """A tensor the caller fills. The allocator may reuse an input's memory once its last
        reader has run; a `constant` (written once, at build) is also flagged as an output,
        which keeps its memory for the graph's lifetime."""
        g = self.g
        dims = (ctypes.c_int64 * 4)(*ne, *([1] * (4 - len(ne))))
        t = g.ggml_new_tensor(self.ctx, kind, len(ne), dims)
        g.ggml_set_input(t)
        if constant:
            g.ggml_set_output(t)
        self.inputs[name] = t
        return t

    def build(self, blocks: Sequence[tuple[int, int]], *,
              hidden_rows: bool) -> dict[str, object]:
        g, cfg, w = self.g, self.cfg, self.w
        n_q = sum(rows for rows, _ in blocks)
        # Equal blocks of several rows: f32 GEMMs take them one block at a time (matmul)
        self.block_rows = blocks[0][0] if len({rows for rows, _ in blocks}) == 1 else 0
        self.masses = []  # the blocks' masses where there are several (graph outputs)
        tokens = self.input("tokens", g.GGML_TYPE_I32, n_q)
        positions = self.input("positions", g.GGML_TYPE_I32, n_q)
        slots = self.input("slots", g.GGML_TYPE_I64, n_q)
        masks = [self.input(f"mask{b}", g.GGML_TYPE_F32, n_kv, rows)
                 for b, (rows, n_kv) in enumerate(blocks)]
        self.value_slots = (self.input("value_slots", g.GGML_TYPE_I64, cfg.kv_dim * n_q)
                            if self.arena.values_by_dimension else None)
        KVH = cfg.n_kv_heads
        widest = max(rows for rows, _ in blocks)
        self.ones = self.input("ones", g.GGML_TYPE_F32, 1, cfg.group_size * widest, KVH,
                               constant=True)
        self.key_heads = key_group(cfg.head_dim, KVH, cfg.group_size) if n_q == 1 else 1
        if self.key_heads > 1:  # attend.py's grouped decode product
            heads = self.key_heads
            self.input("query_blocks", g.GGML_TYPE_F32, cfg.head_dim, heads,
                       heads * cfg.group_size, KVH // heads, constant=True)
        x = g.ggml_get_rows(self.ctx, w.token_embd, tokens)  # (n_q, d)
        if cfg.arch.embed_scale:  # sqrt(d_model) rounded to f32 first, as HF and numpy do
            x = g.ggml_scale(self.ctx, x, float(np.float32(cfg.d_model ** 0.5)))
        if WINDOW in cfg.kinds:
            window_keys = self.window_rows if n_q == 1 else cfg.window + n_q
            self.window_inputs = (self.input("wslots", g.GGML_TYPE_I64, n_q),
                                  self.input("wmask", g.GGML_TYPE_F32, window_keys, n_q))
            self.window_value_slots = (
                self.input("wvalue_slots", g.GGML_TYPE_I64, min(n_q, cfg.window) * cfg.kv_dim)
                if self.arena.values_by_dimension else None)
        masses = None  # each block's, summed over the FULL layers: (KVH, 1, n_kv)
        for layer, lw in enumerate(w.layers):
            plane = cfg.plane(layer)
            kind = cfg.kinds[layer]
            if kind == FULL:
                attn, layer_masses = self.attention(plane, lw, x, positions, slots, masks,
                                                    blocks)
                masses = layer_masses if masses is None else [
                    g.ggml_add(self.ctx, total, m) for total, m in zip(masses, layer_masses)]
                for total in masses:  # summed now, not at the end (see attention())
                    self.emit(total)
            elif kind == CONV:
                attn = self.short_conv(plane, lw, x, n_q)
            elif kind == DELTA:
                attn = self.delta_net(plane, lw, x, n_q)
            else:
                attn = self.window_attention(plane, lw, x, positions, n_q)
            x = g.ggml_add(self.ctx, x, self.post_norm(attn, lw.post_attn_norm))
            ffn = self.feed_forward(lw, x)
            x = g.ggml_add(self.ctx, x, self.post_norm(ffn, lw.post_ffn_norm))
        if masses is None:
            raise ValueError("a model needs at least one full-attention layer for its ring")
        for mass, (_, n_kv) in zip(masses, blocks):
            # The per-K/V-head partial sums, summed (out_prod over dimension 1 once more).
            mass = g.ggml_out_prod(self.ctx, g.ggml_reshape_2d(self.ctx, mass, n_kv, KVH),
                                   g.ggml_view_2d(self.ctx, self.ones, 1, KVH, 4, 0))
            if len(blocks) == 1:  # (1, n_kv)
                self.emit(g.ggml_cpy(self.ctx, g.ggml_reshape_1d(self.ctx, mass, n_kv),
                                     self.arena.mass(self.ctx, n_kv)))
            else:  # kept until read (the output flag): the ring commits blocks one by one
                g.ggml_set_output(mass)
                self.emit(mass)
                self.masses.append(mass)
        if hidden_rows:
            normed = self.norm(x, w.output_norm)
            self.emit(g.ggml_cpy(self.ctx, normed, self.arena.hidden(self.ctx, n_q)))
        last = g.ggml_view_2d(self.ctx, x, cfg.d_model, 1, x.contents.nb[1],
                              (n_q - 1) * x.contents.nb[1])
        logits = g.ggml_mul_mat(self.ctx, w.output, self.norm(last, w.output_norm))
        self.emit(g.ggml_cpy(self.ctx, g.ggml_reshape_1d(self.ctx, logits, cfg.vocab_size),
                             self.arena.logits))
        return self.inputs

    def emit(self, t) -> None:
        self.g.ggml_build_forward_expand(self.graph, t)

    def store_values(self, plane, values, rows, value_slots):
        """The node writing `values` (count, kv_dim) into a value plane: at `rows` of a plane
        by slot, or, where `value_slots` is given (a plane by dimension, kv_dim rows of
        slots), each value as a one-element row at its StepInputs index."""
        g, ctx = self.g, self.ctx
        if value_slots is None:
            return g.ggml_set_rows(ctx, plane, values, rows)
        kv_dim, count = values.contents.ne[0], values.contents.ne[1]
        flat = g.ggml_reshape_2d(ctx, plane, 1, plane.contents.ne[0] * plane.contents.ne[1])
        return g.ggml_set_rows(ctx, flat, g.ggml_reshape_2d(ctx, values, 1, kv_dim * count),
                               value_slots)

    def matmul(self, weight, x, *, exact: bool = False):
        """x @ weight.T. For a batch, quantized weights can be expanded to f32 first (one
        matrix at a time, into reused scratch) so the product runs as an f32 GEMM; `exact`
        expands them for every pass, so that x is not rounded to 8-bit blocks either (for
        the few rows whose error an exponential amplifies)."""
        g = self.g
        expand = weight.contents.type != g.GGML_TYPE_F32 and not self.w.is_repacked(weight)
        if (self.dequantize or exact) and expand:  # repacked layouts have fast batched kernels
            if "arange" not in self.inputs:  # only a graph that gathers has it
                cfg = self.cfg
                widest = max(2 * cfg.ffn_dim, cfg.qkv_dim, cfg.d_model,  # most rows of any
                             cfg.delta_conv_dim)
                self.input("arange", g.GGML_TYPE_I32, widest, constant=True)
            rows = weight.contents.ne[1]
            index = g.ggml_view_1d(self.ctx, self.inputs["arange"], rows, 0)
            weight = g.ggml_get_rows(self.ctx, weight, index)
            n, block = x.contents.ne[1], self.block_rows
            if block and n > block and n % block == 0 and g.ggml_is_contiguous(x):
                # One tiled GEMM per block of rows (ggml runs a 3-D product slice by slice),
                # as each chunk alone would: a 2-D product of the group's whole batch
                # measured 2% slower (forward.py's GROUP_CHUNKS, the same runs).
                x = g.ggml_reshape_3d(self.ctx, x, x.contents.ne[0], block, n // block)
                return g.ggml_reshape_2d(self.ctx, g.ggml_mul_mat(self.ctx, weight, x), rows, n)
        return g.ggml_mul_mat(self.ctx, weight, x)

    def norm(self, x, weight):
        g = self.g
        return g.ggml_mul(self.ctx, g.ggml_rms_norm(self.ctx, x, self.cfg.rms_eps), weight)

    def post_norm(self, t, weight):
        """Gemma's RMSNorm of a block's output before its residual add; else t itself."""
        return t if weight is None else self.norm(t, weight)

    def rope(self, t, positions, *, window: bool = False):
        cfg, g = self.cfg, self.g
        # Mode 0 rotates adjacent pairs (llama's permuted Q/K rows), NEOX split halves: the
        # same layouts as engine/model/rope.py. rope_freqs: Llama 3's per-frequency divisors.
        # WINDOW layers use their own base and no scaling (model/rope.py window_rope_config).
        mode = 0 if cfg.arch.rope_style == INTERLEAVED else g.GGML_ROPE_TYPE_NEOX
        if window:
            return g.ggml_rope_ext(self.ctx, t, positions, None, cfg.rotary_dim, mode,
                                   cfg.context_length, cfg.rope_theta_window or cfg.rope_theta,
                                   1.0, 0.0, 1.0, 0.0, 0.0)
        # Partial rotary (Qwen3.5): ggml rotates the first rotary_dim dims, split-half within.
        return g.ggml_rope_ext(self.ctx, t, positions, self.w.rope_freqs, cfg.rotary_dim, mode,
                               cfg.context_length, cfg.rope_theta, cfg.rope_freq_scale,
                               0.0, 1.0, 0.0, 0.0)

    def project_qkv(self, lw, h, n_q: int):
        """q (n_q, H, hd), k (n_q, KVH, hd) and v (n_q, kv_dim) from the normed input, with
        the architecture's bias and QK-norm applied (RoPE not yet). A gated query's gate
        (n_q, q_dim) is left in self.query_gate (None otherwise)."""
        g, ctx, cfg = self.g, self.ctx, self.cfg
        hd, H, KVH = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
        self.query_gate = None
        if cfg.arch.gated_query:  # attn_q: per head, the query's hd rows then the gate's
            q_gate = self.matmul(lw.wq, h)  # (n_q, 2 * q_dim)
            row, item = q_gate.contents.nb[1], q_gate.contents.nb[0]
            q = g.ggml_view_3d(ctx, q_gate, hd, H, n_q, 2 * hd * item, row, 0)
            gate = g.ggml_view_3d(ctx, q_gate, hd, H, n_q, 2 * hd * item, row, hd * item)
            self.query_gate = g.ggml_reshape_2d(ctx, g.ggml_cont(ctx, gate), cfg.q_dim, n_q)
            k = g.ggml_reshape_3d(ctx, self.matmul(lw.wk, h), hd, KVH, n_q)
            v = self.matmul(lw.wv, h)
        elif lw.wqkv is not None:
            qkv = self.matmul(lw.wqkv, h)  # (n_q, qkv_dim): q | k | v
            row, item = qkv.contents.nb[1], qkv.contents.nb[0]
            q = g.ggml_view_3d(ctx, qkv, hd, H, n_q, hd * item, row, 0)
            k = g.ggml_view_3d(ctx, qkv, hd, KVH, n_q, hd * item, row, cfg.q_dim * item)
            v = g.ggml_cont(ctx, g.ggml_view_2d(ctx, qkv, cfg.kv_dim, n_q, row,
                                                (cfg.q_dim + cfg.kv_dim) * item))
        else:
            q, k, v = (self.matmul(w, h) for w in (lw.wq, lw.wk, lw.wv))
            if lw.bq is not None:
                q, k, v = (g.ggml_add(ctx, t, b) for t, b in ((q, lw.bq), (k, lw.bk), (v, lw.bv)))
            q = g.ggml_reshape_3d(ctx, q, hd, H, n_q)
            k = g.ggml_reshape_3d(ctx, k, hd, KVH, n_q)
        if lw.q_norm is not None:
            q = self.norm(q, lw.q_norm)  # over each head's hd values
            k = self.norm(k, lw.k_norm)
        return q, k, v

    def feed_forward(self, lw, x):
        g, ctx = self.g, self.ctx
        h = self.norm(x, lw.ffn_norm)
        if lw.w_gate is None:  # one product: gate rows then up rows, split by swiglu
            gated = g.ggml_swiglu(ctx, self.matmul(lw.w_up, h))
        elif self.cfg.arch.geglu:  # GELU's tanh approximation, as HF's gelu_pytorch_tanh
            gated = g.ggml_geglu_split(ctx, self.matmul(lw.w_gate, h), self.matmul(lw.w_up, h))
        else:
            gated = g.ggml_swiglu_split(ctx, self.matmul(lw.w_gate, h),
                                        self.matmul(lw.w_up, h))
        return self.matmul(lw.w_down, gated)
