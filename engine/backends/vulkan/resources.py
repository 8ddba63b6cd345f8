"""A conversation's device resources: scratch buffers, the step parameters, one descriptor set.

The arena (K/V planes, mass, logits, rebase tables) is bound where the conversation's
StateArena already lives; everything here is scratch that is never saved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...model.architecture import CONV, DELTA, WINDOW
from ...model.config import ModelConfig
from ...model.rope import Rope
from ...state.arena import StateArena
from .buffers import (
    HOST_CACHED,
    RGBA32_SFLOAT,
    DeviceBuffer,
    device_buffer,
    host_buffer,
    readback_buffer,
)
from .descriptors import DescriptorSets, kv_groups
from .options import current as current_options
from .pipelines import Pipelines
from .prefill import attention_tiles
from .tuning import Tuning
from .upload import fill_zero
from .weights import DeviceWeights

# C, n0, pos0, N, decay_c, inv_c, wrow, wfill, then the token ids and the RoPE rows
# (common.glsl's Params).
PARAM_WORDS = 8


@dataclass(frozen=True)
class ActLayout:
    """Float offsets of the activation rows in the act buffer; each region is [cmax, width]."""

    x: int  # [cmax, d_model] residual stream
    # Each region's other uses by layer kind: a CONV layer's B | C | x rows (q) and C * conv
    # (attn); a DELTA layer's q|k|v projection (q), its convolution's output (attn) and then
    # the rule's gated output (q again: the projection is spent by then); a WINDOW layer's
    # q | k | v rows (q, q_dim + 2*kv_dim wide).
    q: int  # [cmax, q_dim] post-RoPE queries
    attn: int  # [cmax, q_dim] attention outputs
    ffn: int  # [cmax, ffn_dim] silu(gate) * up
    # [cmax, q_dim] a gated query's gates; a DELTA layer's z [cmax, inner], then its beta |
    # alpha rows [cmax, 2*v_heads] from aux + cmax*inner. Absent (0 wide) in other models.
    aux: int
    floats: int
    # [cmax, d_model] a product's rows before their post-norm (Gemma), which spans the row:
    # the wo and down products store here, then rmsnorm.comp adds them into x. Models
    # without post-norms have no such rows (0 wide, at `floats`).
    y: int = 0

    @staticmethod
    def for_config(cfg: ModelConfig, cmax: int) -> ActLayout:
        conv, delta, window = CONV in cfg.kinds, DELTA in cfg.kinds, WINDOW in cfg.kinds
        q_width = max(cfg.q_dim, 3 * cfg.d_model * conv, cfg.delta_conv_dim * delta,
                      (cfg.q_dim + 2 * cfg.kv_dim) * window)
        attn_width = max(cfg.q_dim, cfg.d_model * conv, cfg.delta_conv_dim * delta)
        aux_width = max(cfg.q_dim * cfg.arch.gated_query,
                        (cfg.delta_inner + 2 * cfg.delta_v_heads) * delta)
        y_width = cfg.d_model * cfg.arch.post_norms
        x, q = 0, cmax * cfg.d_model
        attn = q + cmax * q_width
        ffn = attn + cmax * attn_width
        aux = ffn + cmax * cfg.ffn_dim
        y = aux + cmax * aux_width
        return ActLayout(x, q, attn, ffn, aux, y + cmax * y_width, y)


class ConversationResources:
    def __init__(self, pipes: Pipelines, weights: DeviceWeights, cfg: ModelConfig,
                 arena: StateArena, arena_buf: DeviceBuffer, cmax: int, prows: int,
                 tuning: Tuning, ropes: Sequence[Rope]):
        ctx = pipes.ctx
        self.ctx, self.cmax, self.prows = ctx, cmax, prows
        self.window = cfg.window if WINDOW in cfg.kinds else 0  # rows of a window plane
        slots = arena.layout["mass"].shape[0]
        self.act_layout = ActLayout.for_config(cfg, cmax)
        self.act = device_buffer(ctx, 4 * self.act_layout.floats, "act")  # [floats] f32
        # [prows, slots] unnormalised probabilities, then [prows] their 1/sum.
        self.probs = device_buffer(ctx, 4 * (prows * slots + prows), "probs")
        # Split attention's partials, laid out by shaders/split.glsl. Decode: mass factors
        # [n_full * n_heads, max_splits] (the ring's layers), then per query head the splits'
        # max and sum [n_heads, max_splits] each and unnormalised outputs
        # [n_heads, max_splits, head_dim], then a product's rows before their post-norm
        # [d_model] (matmul.comp's MODE_POSTNORM).
        # Prefill (runs of slots): factors, maxima and sums [prows, prefill_splits] each, then
        # outputs [prows, prefill_splits, head_dim]. One pass uses the buffer at a time.
        nh, runs = cfg.n_heads, tuning.prefill_splits
        split_floats = max(tuning.max_splits * nh * (cfg.n_full + 2 + cfg.head_dim)
                           + cfg.d_model,
                           prows * runs * (3 + cfg.head_dim) if runs > 1 else 0)
        self.splits = device_buffer(ctx, 4 * split_floats, "splits")
        # uint32 runs done, [n_heads] for decode, [n_heads, query tiles] for prefill; the
        # last run to finish resets its count to 0. Then the argmax's: its count and each
        # workgroup's best (bits, index), [1 + 2 * argmax_groups] from argmax_base.
        self.argmax_base = nh * attention_tiles(tuning, cmax)
        counters = self.argmax_base + 1 + 2 * tuning.argmax_groups
        self.counters = device_buffer(ctx, 4 * counters, "counters")
        fill_zero(ctx, self.counters)
        # After the token ids, each RoPE's cos then sin rows of the pass's positions
        # [ropes, 2, cmax, head_dim/2] f32 (the ring's, then a WINDOW layer's own): computed
        # for each pass, not tabled for the whole context.
        half = cfg.head_dim // 2
        words = PARAM_WORDS + cmax + 2 * len(ropes) * cmax * half
        self.params = host_buffer(ctx, 4 * words, "params")
        p = self.params.array
        self.header = p[: 4 * PARAM_WORDS].view(np.uint32)  # [8] uint32
        self.tokens = p[4 * PARAM_WORDS : 4 * (PARAM_WORDS + cmax)].view(np.int32)  # [cmax]
        rows = p[4 * (PARAM_WORDS + cmax) : 4 * words].view(np.float32)
        rows = rows.reshape(len(ropes), 2, cmax, half)
        self._ropes = [(rope, rows[t, 0], rows[t, 1]) for t, rope in enumerate(ropes)]
        # COS_OFF, SIN_OFF of each RoPE: where its rows start, as indices of prm.tokens.
        self.rope_offsets = [(cmax + 2 * t * cmax * half, cmax + (2 * t + 1) * cmax * half)
                             for t in range(len(ropes))]
        self._rope_scratch = np.empty((cmax, 1)), np.empty((cmax, half))  # float64
        self._decay_words: dict[tuple[int, float], np.ndarray] = {}  # set_step's words 4-5
        self.hidden_buf = readback_buffer(ctx, 4 * cmax * cfg.d_model, "hidden")
        self.hidden = self.hidden_buf.array.view(np.float32).reshape(cmax, cfg.d_model)
        # Arena memory the CPU reads slowly (a GPU's BAR window is uncached: ~50 MB/s here)
        # gets host-cached mirrors: logits copied on the device after every pass, and
        # snapshot regions staged on demand (forward.read_regions).
        # options.force_staging takes the staging path on any device (tests cover it so).
        self.arena_cached = (bool(arena_buf.memory_flags & HOST_CACHED)
                             and not current_options().force_staging)
        self.arena_offset = base_offset(arena, arena_buf)
        logits = arena.layout["logits"]
        self.logits_region = (self.arena_offset + logits.offset, logits.nbytes)
        self.logits_host = None
        if not self.arena_cached:
            self.logits_buf = readback_buffer(ctx, logits.nbytes, "logits.host")
            self.logits_host = self.logits_buf.array.view(np.float32)  # [V] f32
        self.out_buf = readback_buffer(ctx, 64, "out")
        self.out = self.out_buf.array[:16].view(np.uint32)  # [4]: argmax index, its logit bits

        base = self.arena_offset

        def region(name: str) -> tuple[DeviceBuffer, int, int]:
            r = arena.layout[name]
            return arena_buf, base + r.offset, r.nbytes

        whole = lambda b: (b, 0, b.size)  # noqa: E731
        for name in ("kw_cache", "vw_cache"):  # bound whole: no group of planes as the ring's
            if name in arena.layout and arena.layout[name].nbytes > ctx.limits.max_storage_range:
                raise ValueError(
                    f"the window layers' {name} planes ({arena.layout[name].nbytes} bytes) "
                    f"exceed this device's maxStorageBufferRange "
                    f"({ctx.limits.max_storage_range} bytes): use --backend ggml")
        # Bindings 0-1 (a weight chunk) and 4-7 (a group of layers' K/V planes) differ per
        # set (descriptors.py); these are the same in every set.
        shared = {
            2: whole(weights.vec), 3: whole(self.act),
            8: region("mass"), 9: region("logits"), 10: whole(self.params),
            11: whole(self.probs), 12: whole(self.hidden_buf),
            13: region("rebase_cos"), 14: region("rebase_sin"),
            15: (whole(self.act), RGBA32_SFLOAT, 16), 16: (whole(weights.vec), RGBA32_SFLOAT, 16),
            17: whole(self.out_buf), 18: whole(self.splits), 19: whole(self.counters),
            20: region("slot_salience"),
            # Conv carries and delta-rule states; a model without such layers binds a stand-in
            # the shaders it runs never read. No model has both CONV and DELTA layers.
            21: region("conv_state") if "conv_state" in arena.layout else
            region("delta_conv") if "delta_conv" in arena.layout else whole(self.out_buf),
            24: region("delta_state") if "delta_state" in arena.layout else whole(self.out_buf),
            # WINDOW layers' circular planes (window_attention.comp), or stand-ins likewise.
            22: region("kw_cache") if "kw_cache" in arena.layout else whole(self.out_buf),
            23: region("vw_cache") if "vw_cache" in arena.layout else whole(self.out_buf),
        }
        # The ring's planes: one a FULL layer (cfg.plane(layer) of the layer's).
        plane = arena.layout["k_cache"].nbytes // cfg.n_full  # one layer's K (or V) plane
        self.kv_groups = kv_groups(ctx, cfg.n_full, plane)
        self._kv_group = [g for g, (_, n) in enumerate(self.kv_groups) for _ in range(n)]
        self.sets = DescriptorSets(ctx, pipes, weights, shared, region("k_cache"),
                                   region("v_cache"), self.kv_groups, plane)
        self.sets.get(0, 0)  # made now, so a binding past the limits is refused at setup
        # Texel views belong to their buffers; the arena's also die with it, so hold the buffer.
        self.arena_buf = arena_buf

    def kv_place(self, layer: int) -> tuple[int, int]:
        """(K/V group, plane within it) of the ring's plane `layer` (a FULL layer's
        cfg.plane): the shaders index the bound planes so."""
        g = self._kv_group[layer]
        return g, layer - self.kv_groups[g][0]

    def set_step(self, count: int, n0: int, pos0: int, decay: float, clock: int = 0) -> None:
        """The pass's tokens: `count` of them from slot n0 at position pos0; `decay` is the
        ring policy's salience decay per token (mass.comp folds scores on the device);
        `clock` is the ring's clock before the pass, which places the tokens in the WINDOW
        layers' circular planes (computed here, in Python's integers: the clock is 64-bit)."""
        h = self.header
        h[0], h[1], h[2], h[3] = count, n0, pos0, n0 + count
        positions, angle = self._rope_scratch
        for rope, cos, sin in self._ropes:
            rope.fill_rows(pos0, cos[:count], sin[:count], positions[:count], angle[:count])
        if self.window:
            h[6], h[7] = clock % self.window, min(clock, self.window)
        words = self._decay_words.get((count, decay))
        if words is None:  # once per chunk size: decode's step then builds no array
            # As update_scores rounds them: a Python float scalar meets float32 arrays.
            words = np.array([decay**count, 1.0 / count], np.float32).view(np.uint32)
            self._decay_words[(count, decay)] = words
        h[4:6] = words


def base_offset(arena: StateArena, arena_buf: DeviceBuffer) -> int:
    """The arena's aligned base, as an offset into its device buffer."""
    return arena.base_address - arena_buf.address

