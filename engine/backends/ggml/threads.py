"""How many threads a decode step should use, learned from how long steps actually take.

ggml's workers meet at a barrier after every graph node (hundreds per token) and spin there.
When another process takes one of the cores, a worker that is descheduled stalls every barrier
for a scheduler time slice, and a multi-threaded step becomes slower than a single-threaded
one (measured ~10x for spinning BLAS threads on a 2-core machine). No load figure predicts this
reliably, so the tuner measures: it runs mostly at the count that was fastest lately and
periodically spends a few steps re-measuring the others.
"""

from __future__ import annotations

import statistics
from collections import deque

PROBE_EVERY = 48  # steps between re-measurements of the other thread counts
PROBE_STEPS = 3  # steps measured per count in a probe


class ThreadTuner:
    def __init__(self, max_threads: int):
        self.counts = sorted({max_threads, 1}, reverse=True)
        self.current = self.counts[0]
        self._times: dict[int, deque[float]] = {n: deque(maxlen=PROBE_STEPS) for n in self.counts}
        self._steps = 0
        self._probe: list[int] = []  # counts still to measure in the running probe

    def next_count(self) -> int:
        """The thread count for the next step."""
        if len(self.counts) == 1:
            return self.current
        if not self._probe and self._steps % PROBE_EVERY == PROBE_EVERY - 1:
            self._probe = [n for n in self.counts if n != self.current for _ in range(PROBE_STEPS)]
        return self._probe[0] if self._probe else self.current

    def record(self, threads: int, seconds: float) -> None:
        """The step that ran with `threads` took `seconds`. Only the last PROBE_STEPS times of
        each count are kept, so a probe compares fresh figures at the same context length."""
        self._steps += 1
        if threads in self._times:
            self._times[threads].append(seconds)
        if self._probe and self._probe[0] == threads:
            self._probe.pop(0)
            if not self._probe:
                self.current = self._fastest()

    def _fastest(self) -> int:
        measured = {n: statistics.median(t) for n, t in self._times.items() if t}
        return min(measured, key=measured.get) if measured else self.current

    def describe(self) -> dict:
        return {"threads": self.current,
                "step_ms": {n: round(1000 * statistics.median(t), 2)
                            for n, t in self._times.items() if t}}
