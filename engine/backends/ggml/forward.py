"""The ggml forward pass: numpy Forward's contract, computed by ggml's quantized CPU kernels.

Decode re-runs a prebuilt graph per context bucket (n_kv rounded up to BUCKET slots, the
tail masked out), so a step costs four small input writes and one compute call: no Python-side
graph building and no allocation. Prefill builds one graph per chunk; its cost is amortised
over the chunk's tokens; where the ring has room, several chunks share one graph (graph.py's
query blocks), so each quantized matrix is expanded to f32 once for all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ...align import align_up
from ...model.architecture import WINDOW
from ...state.ring import KVRing, SlotSpan
from ..base import ForwardPass, HiddenCallback, ProgressCallback, prefill_in_chunks
from ..window_mask import decode_window_mask, window_mask
from .arena_tensors import ArenaTensors
from .graph import StepGraph
from .lib import free_with, ggml, host_buffer
from .weights import GgmlWeights

if TYPE_CHECKING:
    from .backend import GgmlBackend

BUCKET = 256  # decode graphs cover the ring in steps of this many slots
# below BUCKET, in these: a young conversation's step attends over 64 or 128 slots, not 256
# (at 1-129 live slots, the Q.K and value products were 13% of the shipped model's step)
SMALL_BUCKETS = (64, 128)
WINDOW_BUCKET = 64  # and a young conversation's window planes in steps of this many rows
# From this many tokens a prefill chunk expands each quantized matrix to f32 and runs ggml's
# tiled f32 GEMM: measured single-threaded, 273 tok/s against 168 for the quantized products.
DEQUANTIZE_FROM = 32
# A prefill chunk attends over a whole number of these slots (the extra ones masked): ggml's
# tiled GEMM (llamafile) only takes contraction lengths it can tile, and P·V contracts over
# the slots. A turn starts at any slot, and unaligned spans fell back to ggml's generic
# kernel, 10-20% slower per chunk.
ATTEND_ALIGN = 32
# A prefill graph takes up to this many chunks whose matrices are expanded to f32 (graph.py's
# query blocks), where their feed-forward activations (three (tokens, ffn_dim) f32 tensors
# live at once) stay within GROUP_BYTES. Measured on the shipped model, a 2048-token prefill
# from empty, one thread, six alternating runs each (2026-12-07): 4 chunks of 256 a graph
# 1.079x as fast as one (the expansion is 10% of a chunk's time), 2 chunks 1.044x; 8 chunks
# gained nothing over one in another run (the batch's activations outgrow the caches).
GROUP_CHUNKS = 4
GROUP_BYTES = 96 << 20


class GgmlForward(ForwardPass):
    projects_hidden = True

    def __init__(self, backend: GgmlBackend, weights: GgmlWeights, ring: KVRing):
        g = ggml()
        self._backend = backend
        self.w = weights
        self.ring = ring
        self.cfg = ring.cfg
        self.tensors = ArenaTensors(ring.arena)
        self._buffer_type = g.ggml_backend_cpu_buffer_type()
        self._prefill_alloc = g.ggml_gallocr_new(self._buffer_type)
        # One graph, and so one allocator, per bucket: an allocator that grows frees the
        # memory older graphs of it point into.
        self._decode: dict[tuple[int, int], StepGraph] = {}  # by (ring slots, window rows)
        self._allocators = [self._prefill_alloc]  # freed with this object
        self._free = free_with(self, allocators=self._allocators)
        chunk = ring.policy.prefill_chunk
        by_memory = GROUP_BYTES // (3 * 4 * max(self.cfg.ffn_dim, 1)) // chunk * chunk
        # Grouping saves expansions only: none where chunks are not expanded or every
        # matrix is repacked. WINDOW layers take one chunk a graph (hybrid_blocks.py).
        groups = (chunk >= DEQUANTIZE_FROM and weights.expands_in_prefill()
                  and WINDOW not in self.cfg.kinds)
        self.group_limit = min(GROUP_CHUNKS * chunk, by_memory) if groups else 0

    # -- prefill ----------------------------------------------------------------------------
    def prefill(self, tokens: Sequence[int], *, anchors: bool = False,
                on_hidden: HiddenCallback | None = None,
                should_stop: Callable[[], bool] | None = None,
                on_progress: ProgressCallback | None = None) -> np.ndarray | None:
        """Ingest tokens in chunks; return the logits after the last one (an arena view), or
        None if `should_stop` said so, between chunks or inside one (between two graph nodes:
        a chunk is seconds on a small CPU, a node milliseconds)."""

        def run(span: SlotSpan, chunk: Sequence[int], _last: bool) -> bool:
            if self._prefill_pass(span, chunk, len(chunk), hidden=on_hidden is not None,
                                  should_stop=should_stop) is None:
                return False
            if on_hidden is not None:
                on_hidden(self.ring.arena.views().p_xn[: len(chunk)])
            return True

        def run_group(span: SlotSpan, group: Sequence[int], chunk: int) -> list | None:
            return self._prefill_pass(span, group, chunk, hidden=False, should_stop=should_stop)

        done = prefill_in_chunks(self.ring, tokens, self.ring.policy.prefill_chunk, run,
                                 anchors=anchors, should_stop=should_stop,
                                 on_progress=on_progress,
                                 run_group=run_group if on_hidden is None else None,
                                 group_limit=self.group_limit)
        return self.ring.arena.views().logits if done else None

    def _prefill_pass(self, span: SlotSpan, tokens: Sequence[int], chunk: int, *,
                      hidden: bool, should_stop: Callable[[], bool] | None = None,
                      ) -> list[np.ndarray] | None:
        """One graph over `tokens`, their attention in query blocks of `chunk` rows; returns
        each block's mass (one block's is in the arena's `mass`), or None if stopped."""
        n, v = span.start, self.ring.arena.views()
        blocks = []
        for first in range(0, len(tokens), chunk):
            rows = min(chunk, len(tokens) - first)
            N = n + first + rows
            # Slots past N hold finite values (zeros, or evicted rows): masked they weigh 0.
            blocks.append((rows, max(N, min(align_up(N, ATTEND_ALIGN),
                                            self.ring.policy.max_slots))))
        graph = StepGraph(self.w, self.cfg, self.tensors, blocks, hidden_rows=hidden,
                          dequantize=chunk >= DEQUANTIZE_FROM, allocator=self._prefill_alloc)
        try:
            inp, C = graph.inputs, len(tokens)
            inp.tokens[:] = tokens
            np.add(v.slot_index[:C], span.pos, out=inp.positions)
            np.add(v.slot_index[:C], n, out=inp.slots, casting="unsafe")
            first = n
            for mask, (rows, _) in zip(inp.masks, blocks):
                mask[:, :first] = 0.0
                mask[:, first : first + rows] = v.p_causal[:rows, :rows]
                mask[:, first + rows :] = -np.inf
                first += rows
            self._window_inputs(inp)
            inp.place_values()
            if not self._backend.run(graph, timed=False, should_stop=should_stop):
                return None
            return graph.masses()
        finally:
            graph.close()

    # -- decode -----------------------------------------------------------------------------
    def decode_one_token(self, token: int) -> np.ndarray:
        """Ingest one token and return the next-token logits (an arena view)."""
        span = self.ring.reserve(1)
        v = self.ring.arena.views().check()
        N = span.start + 1
        graph = self._decode_graph(N, self.ring.clock + 1)
        inp = graph.inputs
        inp.tokens[0] = token
        inp.positions[0] = span.pos
        inp.slots[0] = span.start
        inp.masks[0][0, :N] = 0.0
        inp.masks[0][0, N:] = -np.inf
        self._window_inputs(inp)
        graph.inputs.place_values()
        self._backend.run(graph, timed=True)
        self.ring.commit(span, v.mass)
        return v.logits

    def _window_inputs(self, inp) -> None:
        """The WINDOW layers' inputs for the tokens after the ring's clock: each token's
        circular row, and the mask over the keys the graph gives those layers (the plane's
        rows for one token, written first; else the plane's old rows and the chunk's own)."""
        rows, before = inp.wslots, self.ring.clock
        if not rows.size:
            return
        np.add(self.ring.arena.views().slot_index[: rows.shape[0]], before, out=rows,
               casting="unsafe")
        np.remainder(rows, self.cfg.window, out=rows)
        if rows.shape[0] == 1:
            decode_window_mask(inp.wmask, before, self.cfg.window)  # allocates nothing
        else:
            window_mask(inp.wmask, before, self.cfg.window)

    def project_logits(self, hidden: np.ndarray, out: np.ndarray) -> None:
        """out (R, vocab) = logits of final-normed hidden rows (R, d_model), for scoring every
        row of a prefill (perplexity). ggml reads and writes both arrays in place."""
        g = ggml()
        rows, d = hidden.shape
        if out.shape != (rows, self.cfg.vocab_size) or out.dtype != np.float32:
            raise ValueError(f"project_logits: out must be float32 {(rows, self.cfg.vocab_size)}")
        hidden = np.ascontiguousarray(hidden, np.float32)
        ctx = g.ggml_init(g.ggml_init_params(mem_size=8 * g.ggml_tensor_overhead()
                                             + g.ggml_graph_overhead(), no_alloc=True))
        buffers = [host_buffer(a.ctypes.data, a.nbytes) for a in (hidden, out)]
        try:
            h = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, d, rows)
            g.ggml_backend_tensor_alloc(buffers[0], h, hidden.ctypes.data)
            logits = g.ggml_mul_mat(ctx, self.w.output, h)  # (rows, vocab)
            g.ggml_backend_tensor_alloc(buffers[1], logits, out.ctypes.data)
            graph = g.ggml_new_graph(ctx)
            g.ggml_build_forward_expand(graph, logits)
            self._backend.compute(graph)
        finally:
            g.ggml_free(ctx)
            for buffer in buffers:
                g.ggml_backend_buffer_free(buffer)

    def _decode_graph(self, n_kv: int, stamp: int) -> StepGraph:
        """The graph for a step over n_kv ring slots by the token stamped `stamp`: WINDOW
        layers attend only the rows written so far, in buckets too, until the plane fills."""
        bucket = min(decode_bucket(n_kv), self.ring.policy.max_slots)
        window = self.cfg.window
        rows = min(align_up(min(stamp, window), WINDOW_BUCKET), window) if window else 0
        graph = self._decode.get((bucket, rows))
        if graph is None:
            allocator = ggml().ggml_gallocr_new(self._buffer_type)
            self._allocators.append(allocator)
            graph = self._decode[bucket, rows] = StepGraph(
                self.w, self.cfg, self.tensors, [(1, bucket)], hidden_rows=False,
                dequantize=False, allocator=allocator, window_rows=rows)
        return graph

    def close(self) -> None:
        for graph in self._decode.values():
            graph.close()
        self._decode.clear()
        self._free()


def decode_bucket(n_kv: int) -> int:
    """The ring slots a decode graph for n_kv live slots covers (the tail masked out)."""
    small = [b for b in SMALL_BUCKETS if n_kv <= b]
    return small[0] if small else align_up(n_kv, BUCKET)
