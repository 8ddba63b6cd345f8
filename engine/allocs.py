"""Measuring memory: what a hot loop allocates (tracemalloc, which numpy reports its buffers
to), and the process's resident set."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AllocationReport:
    numpy_new_buffers: int  # numpy data buffers alive after the steps that were not before
    numpy_net_bytes: int  # their bytes
    peak_transient_bytes: int  # largest rise of all traced memory during one step (any domain)


def measure_allocations(step: Callable[[], object], repeat: int = 8) -> AllocationReport:
    """Run `step` `repeat` times under tracemalloc.

    numpy's buffers live in their own tracemalloc domain, so growth there is exactly the numpy
    buffers a step kept. A temporary that a step allocated and freed again leaves no trace, but
    it lifts the peak: the peak rise bounds it from above (Python objects such as views count
    towards the peak too).
    """
    only_numpy = [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot().filter_traces(only_numpy)
        peak_rise = 0
        for _ in range(repeat):
            tracemalloc.reset_peak()
            base, _ = tracemalloc.get_traced_memory()
            step()
            _, peak = tracemalloc.get_traced_memory()
            peak_rise = max(peak_rise, peak - base)
        after = tracemalloc.take_snapshot().filter_traces(only_numpy)
    finally:
        tracemalloc.stop()
    diff = after.compare_to(before, "traceback")
    return AllocationReport(
        numpy_new_buffers=sum(max(s.count_diff, 0) for s in diff),
        numpy_net_bytes=sum(s.size_diff for s in diff),
        peak_transient_bytes=peak_rise,
    )


def rss_mb() -> tuple[float, float]:
    """(current, peak) resident set size in MB, from /proc (Linux)."""
    fields = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
    except OSError:
        return float("nan"), float("nan")

    def mb(key: str) -> float:
        return int(fields.get(key, "0 kB").split()[0]) / 1024

    return mb("VmRSS"), mb("VmHWM")
