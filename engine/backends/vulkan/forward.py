"""The Vulkan forward pass, with numpy Forward's contract (see engine/backends/base.py).

The ring's bookkeeping (reserve, commit, eviction, rebase) stays in numpy on the arena, which
lives in mapped device memory; this class only fills in what the numpy pass computes on the
CPU: post-RoPE keys and values in `k_cache`/`v_cache`, attention mass in `mass`, next-token
logits in `logits`. Each step writes the parameter buffer and re-submits a command buffer that
was recorded once.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence

import numpy as np

from ...align import align_up, ceil_div
from ...model.architecture import WINDOW
from ...state.ring import KVRing, SlotSpan
from ..base import KV_REGIONS, ForwardPass, HiddenCallback, ProgressCallback, prefill_in_chunks
from .buffers import DeviceBuffer, readback_buffer
from .passes import PassRecorder, PassShape
from .pipelines import Pipelines
from .profiler import DispatchTimer
from .resources import ConversationResources
from .submit import Submission
from .tuning import Tuning, for_heads
from .upload import run_once
from .weights import DeviceWeights


def _retire(ctx, passes: dict[PassShape, Submission]) -> None:
    ctx.retire([s.command_buffer for s in passes.values()], [s.fence for s in passes.values()])


class VulkanForward(ForwardPass):
    def __init__(self, pipes: Pipelines, weights: DeviceWeights, ring: KVRing,
                 arena_buf: DeviceBuffer, tuning: Tuning):
        cfg = ring.cfg
        tuning = for_heads(tuning, cfg.head_dim, pipes.ctx.subgroup_size, ring.policy.max_slots)
        self.ring, self.cfg, self.pipes, self.tuning = ring, cfg, pipes, tuning
        self.ctx = pipes.ctx
        self.chunk = max(1, min(ring.policy.prefill_chunk, tuning.prefill_chunk))
        self.decay = ring.policy.salience_decay
        # Probability rows: every ring layer's heads for one decoded token, or one layer's heads
        # for every token of a prefill chunk.
        prows = max(cfg.n_full * cfg.n_heads, cfg.n_heads * self.chunk)
        ropes = (ring.rope, ring.window_rope) if WINDOW in cfg.kinds else (ring.rope,)
        self.res = ConversationResources(pipes, weights, cfg, ring.arena, arena_buf,
                                         self.chunk, prows, tuning, ropes)
        self.recorder = PassRecorder(pipes, weights, self.res, cfg, ring.policy, tuning)
        self._passes: dict[PassShape, Submission] = {}
        self._staging: dict[str, DeviceBuffer] = {}  # _stage's buffers, by purpose
        self.dispatch_counts: dict[PassShape, int] = {}
        self._decode = self._pass(PassShape(1, decode=True, logits=True, hidden=False))
        weakref.finalize(self, _retire, self.ctx, self._passes).atexit = False
        self.dispatches_per_token = self.dispatch_counts[PassShape(1, True, True, False)]
        if not self.res.arena_cached:  # the CPU reads this arena slowly: rebases and marks
            ring.device = self  # run their bulk work here (RingDevice)

    def _pass(self, shape: PassShape) -> Submission:
        """The recorded command buffer for `shape`, recorded on first use."""
        sub = self._passes.get(shape)
        if sub is None:
            cb = self.ctx.command_buffers(1)[0]
            self.dispatch_counts[shape] = self.recorder.record(cb, shape)
            sub = self._passes[shape] = Submission(self.ctx, cb)
        return sub

    def _run(self, sub: Submission) -> None:
        sub.run()
        if self.recorder.timer is not None:
            self.recorder.timer.submitted(sub.command_buffer)

    def set_timer(self, timer: DispatchTimer | None) -> None:
        """Measure (or stop measuring) every dispatch's device time: the passes are recorded
        again, with a timestamp after each dispatch (profiler.py). Not for serving."""
        _retire(self.ctx, self._passes)
        self._passes.clear()
        self.recorder.timer = timer
        self._decode = self._pass(PassShape(1, decode=True, logits=True, hidden=False))

    def _bucket(self, count: int) -> int:
        """Chunk sizes are recorded in powers of two, capped at the chunk size."""
        b = 1
        while b < count:
            b *= 2
        return min(b, self.chunk)

    # -- prefill --------------------------------------------------------------------------
    def prefill(self, tokens: Sequence[int], *, anchors: bool = False,
                on_hidden: HiddenCallback | None = None,
                should_stop: Callable[[], bool] | None = None,
                on_progress: ProgressCallback | None = None) -> np.ndarray | None:
        """Ingest tokens in chunks; return the logits after the last one (an arena view), or
        None if `should_stop` said so between chunks."""

        def run(span: SlotSpan, chunk: Sequence[int], last: bool) -> None:
            shape = PassShape(self._bucket(len(chunk)), decode=False, logits=last,
                              hidden=on_hidden is not None)
            self.res.tokens[: len(chunk)] = chunk
            self.res.set_step(len(chunk), span.start, span.pos, self.decay, self._clock())
            self._run(self._pass(shape))
            if on_hidden is not None:
                on_hidden(self.res.hidden[: len(chunk)])

        # Each pass's last mass dispatch folds it into the ring's scores (scored).
        done = prefill_in_chunks(self.ring, tokens, self.chunk, run, anchors=anchors,
                                 should_stop=should_stop, scored=True,
                                 on_progress=on_progress)
        return self._logits(self.ring.arena.views()) if done else None

    # -- decode ---------------------------------------------------------------------------
    def decode_one_token(self, token: int) -> np.ndarray:
        """Ingest one token and return the next-token logits (an arena view)."""
        span = self.ring.reserve(1)
        v = self.ring.arena.views().check()
        self.res.tokens[0] = token
        self.res.set_step(1, span.start, span.pos, self.decay, self._clock())
        self._run(self._decode)
        self.ring.commit(span, v.mass, scored=True)  # the pass folded mass into the scores
        return self._logits(v)

    def _clock(self) -> int:
        """The ring's clock before the pass, which WINDOW layers place their rows by (0 for
        models without them: their decode step reads no more counters than before)."""
        return self.ring.clock if self.res.window else 0

    def _logits(self, v) -> np.ndarray:
        """The logits to hand back: the arena's, or their host-cached mirror (same values) where
        the arena sits in memory the CPU reads slowly."""
        return v.logits if self.res.logits_host is None else self.res.logits_host

    @property
    def greedy_token(self) -> int:
        """The argmax of the logits the last pass left (first index on ties, as np.argmax),
        computed on the device: a greedy sampler can read this instead of the logits row."""
        return int(self.res.out[0])

    # -- snapshots ------------------------------------------------------------------------
    @property
    def snapshot_path(self) -> str:
        """'mapped': snapshot I/O reads the arena views directly; 'staging': regions are first
        copied on the device into host-cached memory (the arena is a GPU's uncached BAR)."""
        return "mapped" if self.res.arena_cached else "staging"

    def read_regions(self, names: Sequence[str],
                     rows: tuple[int, int] | None = None) -> dict[str, np.ndarray]:
        """Arena regions as the CPU should read them for a snapshot: the views themselves on
        the mapped path, else fresh host-cached copies made by one device copy (with `rows`,
        only those slots of the K/V caches: one run of rows a layer)."""
        self.ring.arena.views().check()
        if self.res.arena_cached:
            return super().read_regions(names, rows)
        return self._stage(names, rows, "snapshot")

    def copy_planes(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Host copies of layer planes for a ring mark (RingDevice), staged on the device into
        their own buffer: a snapshot writer may still be reading the snapshot's."""
        return {name: region.copy() for name, region in self._stage(names, None, "marks").items()}

    def _stage(self, names: Sequence[str], rows: tuple[int, int] | None,
               purpose: str) -> dict[str, np.ndarray]:
        """The regions copied on the device into the host-cached staging buffer kept for
        `purpose` (grown as needed); views of it, valid until its next use."""
        layout, base = self.ring.arena.layout, self.res.arena_offset
        runs = {n: _row_runs(layout[n], rows) for n in names}
        total = sum(align_up(sum(size for _, size in runs[n]), 64) for n in names)
        staging = self._staging.get(purpose)
        if staging is None or staging.size < total:
            staging = self._staging[purpose] = readback_buffer(self.ctx, total,
                                                               f"{purpose}.staging")
        copies, out, cursor = [], {}, 0
        raw = staging.array
        for n in names:
            r, start = layout[n], cursor
            for offset, size in runs[n]:
                copies.append((base + r.offset + offset, cursor, size))
                cursor += size
            shape = r.shape if rows is None or n not in KV_REGIONS else (
                r.shape[0], rows[1] - rows[0], *r.shape[2:])
            out[n] = raw[start:cursor].view(r.dtype).reshape(shape)
            cursor = start + align_up(cursor - start, 64)
        v, src, dst = self.ctx.vk, self.res.arena_buf.handle, staging.handle

        def record(cb) -> None:
            regions = [v.VkBufferCopy(srcOffset=s, dstOffset=d, size=b) for s, d, b in copies]
            v.vkCmdCopyBuffer(cb, src, dst, len(regions), regions)

        if copies:  # a segment of no new rows, and no planes: nothing to read
            run_once(self.ctx, record)
        return out

    # -- ring maintenance -----------------------------------------------------------------
    def rotate_keys(self, count: int) -> None:
        """Rotate the cached keys of slots [0, count) by the arena's rebase_cos/rebase_sin, on
        the device: the rebase step for arenas whose K/V the CPU cannot touch cheaply."""
        # One dispatch a group of K planes (one group: one dispatch).
        self._rotate({"WG": self.tuning.small_wg}, count,
                     [dict(kv_layer=first, flags=layers) for first, layers in self.res.kv_groups])

    def rotate_window_keys(self) -> None:
        """Rotate every WINDOW plane's keys, all rows by the arena's rebase_cos/rebase_sin
        row 0 (rebase.py's shift_window), on the device."""
        cfg = self.cfg
        self._rotate({"WG": self.tuning.small_wg, "WINDOW": cfg.window}, cfg.window,
                     [dict(flags=len(cfg.layers_of(WINDOW)))])

    def _rotate(self, spec: dict, rows: int, dispatches: list[dict]) -> None:
        """rope_rebase.comp over `rows` rows of key planes, one dispatch per push-constant
        set in `dispatches`, recorded and run once."""
        rec, wg = self.recorder, spec["WG"]
        pairs = rows * self.cfg.kv_dim // 2

        def record(cb) -> None:
            rec.cb = cb
            rec.bind(cb)
            for push in dispatches:
                rec._dispatch("rope_rebase", spec, (ceil_div(pairs, wg), 1), count=rows, **push)

        run_once(self.ctx, record)


def _row_runs(region, rows: tuple[int, int] | None) -> list[tuple[int, int]]:
    """(offset in the region, bytes) of what to copy: the whole region, or for the K/V
    caches with `rows`, slots start..stop of each layer."""
    if rows is None or region.name not in KV_REGIONS:
        return [(0, region.nbytes)]
    layers, slots = region.shape[0], region.shape[1]
    row_bytes = region.nbytes // (layers * slots)
    start, stop = rows
    return [((layer * slots + start) * row_bytes, (stop - start) * row_bytes)
            for layer in range(layers) if stop > start]
