"""Workgroup shapes per device kind, and the matmul tiling they imply.

CPU drivers (lavapipe) run a workgroup's invocations as SIMD lanes on one thread, so each
invocation owns whole rows and walks K alone (SPLIT = 1), and several rows per invocation share
each staged input load. GPUs want many threads per row: SPLIT lanes stride over a row's blocks
and reduce through shared memory. GPU prefill chunks of `tiled_from` tokens or more take the
tiled matrix products and tiled attention (engine/backends/vulkan/prefill.py), on cooperative
matrices where the device has them and `coopmat` allows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .context import Context
from .options import current


@dataclass(frozen=True)
class Tuning:
    wg: int  # matmul workgroup size
    rows: int  # R: rows per row group (even: RoPE pairs stay in one invocation)
    split: int  # SPLIT: invocations per row group
    max_tokens: int  # T cap for prefill tiles
    prefill_chunk: int  # largest prefill pass; bounds the probability scratch
    small_wg: int  # workgroup size of the other shaders
    # Decode attention (shaders/split.glsl): a K/V head's live slots are cut into runs of at
    # least split_slots, at most max_splits of them, one workgroup (a subgroup) each.
    split_slots: int = 256
    max_splits: int = 16
    fold_loads: int = 4  # splits' outputs a lane of the fold loads at once
    split_subgroups: int = 1  # subgroups sharing one run (a workgroup), each over a part
    # pv_tile: a subgroup's part of up to value_loads slots per lane group is one tile, its
    # values loaded before the scores and its scores kept in registers.
    value_loads: int = 8
    pv_tile: bool = False  # p * v with lanes across dimensions (GPU) or across slots (CPU)
    mass_split: int = 1  # invocations summing one slot's mass (SPLIT of shaders/mass.comp)
    tiled_from: int = 0  # prefill buckets this large use the tiled shaders (0: never)
    coopmat: bool = False  # tiled products on cooperative matrices where the device has them
    coopmat_tokens: int = 64  # tokens per cooperative-matrix tile: 64 or 32
    # A product whose 64-token tiles would still launch this many workgroups takes them
    # instead (0: every product takes coopmat_tokens): a larger model's products have rows
    # enough to fill the GPU with the larger tile, which stages each weight block half as often.
    coopmat_wide: int = 0
    # Tiled prefill attention (shaders/attention_prefill.comp): queries per workgroup (4, 8 or
    # 16), and at most how many workgroups share one query tile's slots (1: a workgroup walks
    # them all; more: runs of slots, folded by the last run to finish, see split.glsl).
    prefill_queries: int = 16
    prefill_splits: int = 1
    prefill_run_tiles: int = 1  # fewest 32-slot tiles per run (shaders/split.glsl)
    logits_rows: int = 0  # R of the logits product (0: rows); its rows are many, its K short
    # Decode runs cut to one tile a subgroup for the model's head width (for_heads); tests
    # that mean to run the strided form over longer parts turn it off.
    fit_heads: bool = True
    argmax_groups: int = 1  # workgroups of the device argmax (shaders/argmax.glsl)
    # matmul.comp reads its inputs and norm weights through storage-buffer vec4s (the
    # load/store path) rather than as texels (the texture units; one vector load on lavapipe).
    ssbo_inputs: bool = False
    ssbo_weights: bool = False  # and its weights' blocks and scale words likewise

    def __post_init__(self) -> None:
        # attention_prefill.comp: its 128 invocations own whole columns of [queries, 32] scores.
        if self.prefill_queries <= 0 or self.prefill_queries % 4 or self.prefill_splits < 1 \
                or min(self.prefill_run_tiles, self.fold_loads, self.argmax_groups,
                       self.split_subgroups, self.value_loads) < 1 \
                or self.split & (self.split - 1) or self.coopmat_tokens not in (32, 64):
            raise ValueError(f"split must be a power of two (matmul.comp sums a row group by "
                             f"shuffles), prefill_queries a multiple of 4, prefill_splits, "
                             f"prefill_run_tiles, fold_loads, argmax_groups, split_subgroups "
                             f"and value_loads at least 1, coopmat_tokens 32 or 64: "
                             f"{self.split}, {self.prefill_queries}, "
                             f"{self.prefill_splits}, "
                             f"{self.prefill_run_tiles}, {self.fold_loads}, "
                             f"{self.argmax_groups}, {self.split_subgroups}, "
                             f"{self.value_loads}, {self.coopmat_tokens}")

    @property
    def logits_r(self) -> int:
        return self.logits_rows or self.rows


# CPU: no tiles. lavapipe runs a workgroup's invocations as one thread's SIMD lanes, where
# every barrier switches coroutines and shared-memory reads are scalar loads, so it keeps
# matmul.comp's register blocking (the tiles run there in the tests, under the GPU shapes).
# Decode attention: up to 256 slots stay one workgroup per K/V head (no fold of partials);
# longer contexts spread over lavapipe's threads.
CPU = Tuning(wg=32, rows=8, split=1, max_tokens=4, prefill_chunk=128, small_wg=32)
# GPU matmul.comp keeps T at 4 (each token holds 8 input vec4s in registers per invocation),
# which serves decode and chunks under 16 tokens; larger chunks take the tiles. The chunk stays
# 256: forward.py caps it at the ring policy's prefill_chunk (256 by default) anyway, which
# the numpy backend shares, since salience is committed per chunk.
# The attention knobs are what scripts/sweep_vulkan.py measured best on an H200 (2026-12-02,
# best geometric mean over 16/2000/4000 slots and 256/2048-token prompts, docs/vulkan.md):
# decode in 64-slot splits, at most 64 (a 2000-slot context: 32 splits per K/V head) did as
# well as 16-slot ones at every context (scripts/profile_vulkan.py: 16-slot splits were
# slower, 128-slot ones slower at 2000), and prefill attention unsplit was 30% faster at 256
# tokens and 11% slower at 2048: hence runs of at least 8 tiles (256 slots), up to 16 of them.
# mass_split 16: 17 of decode's 270 rows per invocation, loads of 4 in flight.
# logits_rows 4: the logits product (49,152 rows of 576) took 40.7 us with R = 2, 28.7 with 4
# and 33 with 8 or 16 (scripts/profile_vulkan.py, 2026-12-02); the other products were slower
# with R = 4 (they have 576-3072 rows: fewer workgroups).
# split 32: a row group is one whole subgroup, summed by shuffles; K = 576 is then one block a
# lane (18 of 32 lanes), K = 1536 two. The layer products took 1.13 ms a step instead of
# 1.27 at 16 slots (H200, profile_vulkan.py over two shader builds, twice, interleaved).
# split_subgroups 4: four subgroups share each 64-slot run (16 slots each; the sixth lease of
# 2026-12-02 measured 1011 / 794 / 762 tok/s at 21 / 2005 / 4005 slots against 928 / 728 /
# 698 with one subgroup a run). value_loads 8: a subgroup's 16 slots are one tile, two lanes
# to each slot's score (16: one lane, all 32 holding whole heads, was slower at every
# context); fold_loads 8: the sweep's pick in the ninth lease (scripts/device/call2.sh; 1050 /
# 954 / 846 tok/s at 49 / 2033 / 4033 slots), as its 2033-slot best in the eighth.
# coopmat_tokens 32 and prefill_queries 8 (2026-12-03, scripts/device/profile.sh, synthetic
# model of the shipped shape, variants interleaved): a 2048-token prompt's device time 62.6 ms
# in 64-token product tiles, 55.4 in 32 (the products 35.3 -> 28.2 ms), 54.3 with 8-query
# attention tiles (attention 21.2 -> 19.9 ms); 16-token product tiles were slower than 64.
# coopmat_wide 64: a product that launches at least 64 workgroups in 64-token tiles (about
# 1,024 output rows for a 256-token chunk) takes them. Each product's device time in a
# 2048-token prompt, 32- against 64-token tiles (2026-12-07 night, H100, scripts/device/
# tiles.sh, one run): 64 won on every product of 1,024 rows or more (the 1.7B shape's down
# 56.8 -> 35.7 ms, its attention output 17.0 -> 11.9; Qwen2.5's q|k|v of 1,152 rows 9.1 ->
# 7.8; Gemma 3 270M's gate|up 9.6 -> 7.8 and q|k|v 4.9 -> 4.1) and lost on every one of 640
# or 896 rows (Qwen2.5's down 17.3 -> 21.6, Gemma's 5.7 -> 7.3). The evening's rule (384
# workgroups) kept the 1.7B's down and attention output at 32. Whole 2048-token prompts in
# the next call, this rule / 384 / every product at 32: the 1.7B 7,987 / 7,330 / 6,306 tok/s,
# Qwen2.5 22,837 / 22,365 / 20,888, Gemma 31,993 / 30,932 / 30,795; the shipped shape, whose
# gate|up (3,072 rows of 576) now takes 64, 39,180 / 39,886 / 39,491 (its gate|up 11.2 ms
# against 10.8-11.0: the one product of 1,024 rows or more seen to prefer 32, by 3%).
GPU = Tuning(wg=128, rows=2, split=32, max_tokens=4, prefill_chunk=256, small_wg=128,
             split_slots=64, max_splits=64, fold_loads=8, split_subgroups=4, value_loads=8,
             pv_tile=True, mass_split=16, tiled_from=16, coopmat=True, coopmat_tokens=32,
             coopmat_wide=64, prefill_queries=8, prefill_splits=16, prefill_run_tiles=8,
             logits_rows=4)


def for_heads(t: Tuning, head_dim: int, subgroup: int, slots: int) -> Tuning:
    """`t` with decode attention's runs cut short enough that each subgroup's part of one
    is a single tile (attention_split.comp's TILE: VL * SG slots) for this head width.

    Past one tile, the strided form holds a head's whole scaled query per lane: G * HD / 4
    vec4 registers, which spill on wide heads (Gemma 3's and Qwen3.5's 256: 100 us a layer at
    2000 slots on the H200, about what a whole layer of the shipped model takes). More,
    shorter runs (at most `slots`, the ring's, divided by them) keep every part one tile."""
    if not (t.pv_tile and t.fit_heads):
        return t
    h4 = head_dim // 4
    lanes = min(subgroup, h4)  # DL: lanes across a head's vec4s
    tile = min(t.value_loads, lanes) * (subgroup // lanes)  # VL * SG
    run = tile * t.split_subgroups
    if run >= t.split_slots:
        return t
    return replace(t, split_slots=run, max_splits=max(t.max_splits, -(-slots // run)))


def tuning_for(ctx: Context) -> Tuning:
    """GPU or CPU shapes by device type; options.tuning = "gpu"|"cpu" overrides (tests run the
    GPU shapes on lavapipe this way)."""
    forced = (current().tuning or "").lower()
    if forced in ("gpu", "cpu"):
        return GPU if forced == "gpu" else CPU
    return GPU if ctx.is_gpu else CPU


def matmul_tokens(t: Tuning, gate_up: bool, max_shared: int, decode: bool) -> int:
    """Tokens per matmul workgroup: up to max_tokens, as many as the SPLIT reduction's shared
    memory holds ([WG, rows + 1, T] floats: partial dots and sums of squares), a power of two."""
    if decode:
        return 1
    nr = 2 * t.rows if gate_up else t.rows
    tokens = t.max_tokens
    while tokens > 1 and t.split > 1 and 4 * t.wg * (nr + 1) * tokens > max_shared:
        tokens //= 2
    return tokens


def split_runs(t: Tuning, n: int) -> tuple[int, int]:
    """(slots per split, splits) of decode attention for a token that sees n >= 1 live slots:
    shaders/split.glsl's split_len and split_count, mirrored for tests and reports."""
    k = min(max(-(-n // t.split_slots), 1), t.max_splits)
    length = -(-n // k)
    return length, -(-n // length)


def prefill_runs(t: Tuning, n: int) -> tuple[int, int]:
    """(slots per run, runs) of tiled prefill attention over n >= 1 live slots:
    shaders/split.glsl's prefill_run_len, mirrored for tests and reports."""
    tiles = -(-n // 32)
    length = 32 * max(-(-tiles // t.prefill_splits), t.prefill_run_tiles)
    return length, -(-n // length)
