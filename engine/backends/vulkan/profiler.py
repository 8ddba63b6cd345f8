"""GPU time per dispatch: a timestamp after every dispatch of a recorded pass.

For measuring, never on the serving path: `VulkanForward.set_timer(DispatchTimer(ctx))`
re-records the passes with a timestamp query after each dispatch, and `timer.read()` after a
step returns what each dispatch took on the device, in microseconds. Each timestamp waits for
everything before it (bottom of pipe) and every dispatch is followed by a barrier anyway, so the
difference of two neighbours is one dispatch's execution plus its launch and barrier gap:
exactly what the step pays for it.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import median

from .context import Context

QUERY_TYPE_TIMESTAMP = 2
RESULT_64_WAIT = 1 | 2  # VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT
STAGE_BOTTOM_OF_PIPE = 0x2000
STAGE_TOP_OF_PIPE = 0x1


class TimestampsUnsupportedError(RuntimeError):
    pass


class DispatchTimer:
    def __init__(self, ctx: Context, capacity: int = 1024):
        v = ctx.vk
        props = v.vkGetPhysicalDeviceProperties(ctx.physical)
        family = v.vkGetPhysicalDeviceQueueFamilyProperties(ctx.physical)[ctx.queue_family]
        if not int(family.timestampValidBits):
            raise TimestampsUnsupportedError(
                f"Vulkan device {ctx.info.name} has no timestamps on its compute queue")
        self.ctx, self.capacity = ctx, capacity
        self.ns_per_tick = float(props.limits.timestampPeriod)
        self.mask = (1 << min(int(family.timestampValidBits), 64)) - 1
        self.pool = v.vkCreateQueryPool(ctx.device, v.VkQueryPoolCreateInfo(
            queryType=QUERY_TYPE_TIMESTAMP, queryCount=capacity), None)
        self._labels: dict[object, list[str]] = {}  # per recorded command buffer
        self._recording: list[str] | None = None
        self._cb = None
        self._last_cb = None

    def begin(self, cb) -> None:
        """Called right after vkBeginCommandBuffer: reset the pool and stamp the start."""
        v = self.ctx.vk
        v.vkCmdResetQueryPool(cb, self.pool, 0, self.capacity)
        v.vkCmdWriteTimestamp(cb, STAGE_TOP_OF_PIPE, self.pool, 0)
        self._cb, self._recording = cb, []
        self._labels[cb] = self._recording

    def mark(self, label: str) -> None:
        """Stamp the end of the command just recorded, named `label`."""
        labels = self._recording
        if labels is None:
            raise RuntimeError("DispatchTimer.mark outside a recording")
        if len(labels) + 1 >= self.capacity:
            raise ValueError(f"more than {self.capacity - 1} timed commands in one pass")
        labels.append(label)
        self.ctx.vk.vkCmdWriteTimestamp(self._cb, STAGE_BOTTOM_OF_PIPE, self.pool, len(labels))

    def submitted(self, cb) -> None:
        """The command buffer whose timestamps the next read() returns."""
        self._last_cb = cb

    def read(self) -> list[tuple[str, float]]:
        """(label, microseconds) of every timed command of the last submitted pass."""
        labels = self._labels.get(self._last_cb)
        if not labels:
            return []
        ffi, n = self.ctx.ffi, len(labels) + 1
        data = ffi.new(f"uint64_t[{n}]")
        rc = self.ctx.vk.lib.vkGetQueryPoolResults(self.ctx.device, self.pool, 0, n, 8 * n,
                                                   data, 8, RESULT_64_WAIT)
        if rc != 0:
            raise RuntimeError(f"vkGetQueryPoolResults failed (VkResult {rc})")
        us = self.ns_per_tick / 1e3
        return [(label, ((data[i + 1] - data[i]) & self.mask) * us)
                for i, label in enumerate(labels)]


def summarize(samples: list[list[tuple[str, float]]]) -> dict[str, dict]:
    """Per label over steps: dispatches per step and median microseconds per step (summed over
    the dispatches of that label within a step), plus the step's total."""
    per_label: dict[str, list[float]] = defaultdict(list)
    counts: dict[str, int] = {}
    totals = []
    for step in samples:
        sums: dict[str, float] = defaultdict(float)
        for label, us in step:
            sums[label] += us
        for label, us in sums.items():
            per_label[label].append(us)
        counts = {label: sum(1 for lab, _ in step if lab == label) for label in sums}
        totals.append(sum(us for _, us in step))
    out = {label: {"dispatches": counts[label], "us": round(median(v), 2)}
           for label, v in sorted(per_label.items(), key=lambda kv: -median(kv[1]))}
    out["total"] = {"dispatches": sum(counts.values()), "us": round(median(totals), 2)}
    return out
