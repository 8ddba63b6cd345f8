"""How many threads a decode step should use, learned from how long steps actually take.

ggml's workers meet at a barrier after every graph node (hundreds per token) and spin there.
When another process takes one of the cores, a worker that is descheduled stalls every barrier
for a scheduler time slice, and a multi-threaded step becomes slower than a single-threaded
one (measured ~10x for spinning BLAS threads on a 2-core machine). No load figure predicts this
reliably, so the tuner measures. It runs at the count that was fastest when last compared, and
compares again (a few steps at each other count) when a step turns much slower than the recent
ones, and otherwise only every PROBE_EVERY steps, because a probe's steps run at the slower
count. A choice of fewer threads is also re-checked after RECHECK_S, and a batch (prefill)
takes it only while it is that fresh: a prefill is not timed against anything, and a stale
"contended" verdict would slow every later prefill.
"""

from __future__ import annotations

import statistics
import time
from collections import deque

PROBE_EVERY = 256  # steps between routine comparisons
PROBE_STEPS = 3  # steps measured per count in a comparison
SLOWDOWN = 1.5  # a step this much slower than the recent median triggers a comparison
RECENT = 16  # steps the recent median is taken over
RECHECK_S = 5.0  # seconds a choice of fewer threads than the maximum stands unchecked


class ThreadTuner:
    def __init__(self, max_threads: int):
        self.counts = sorted({max_threads, 1}, reverse=True)
        self.current = self.counts[0]
        self._probe_times: dict[int, list[float]] = {}
        self._recent: deque[float] = deque(maxlen=RECENT)  # the current count's step times
        self._since_probe = 0
        self._probe: list[int] = []  # counts still to measure in the running comparison
        self._decided_at = time.monotonic()

    @property
    def max_threads(self) -> int:
        return self.counts[0]

    def next_count(self) -> int:
        """The thread count for the next step."""
        if not self._probe and self.current != self.max_threads and self._stale():
            self._start_probe()
        return self._probe[0] if self._probe else self.current

    def batch_count(self) -> int:
        """The thread count for a batch (prefill): the current choice while it is fresh."""
        return self.current if not self._stale() else self.max_threads

    def _stale(self) -> bool:
        return time.monotonic() - self._decided_at > RECHECK_S

    def record(self, threads: int, seconds: float) -> None:
        """The step that ran with `threads` took `seconds`."""
        if self._probe and self._probe[0] == threads:
            self._probe.pop(0)
            self._probe_times.setdefault(threads, []).append(seconds)
            if not self._probe:
                self._decide()
            return
        if threads != self.current:
            return
        slow = (len(self._recent) == RECENT
                and seconds > SLOWDOWN * statistics.median(self._recent))
        self._recent.append(seconds)
        self._since_probe += 1
        if len(self.counts) > 1 and (slow or self._since_probe >= PROBE_EVERY):
            self._start_probe()

    def _start_probe(self) -> None:
        # The current count is measured again too, right beside the others: the context
        # grows between comparisons, so only same-moment figures compare fairly.
        self._probe = [n for n in self.counts for _ in range(PROBE_STEPS)]
        self._probe_times = {}
        self._since_probe = 0

    def _decide(self) -> None:
        medians = {n: statistics.median(t) for n, t in self._probe_times.items()}
        best = min(medians, key=medians.get)
        self._decided_at = time.monotonic()
        self.current = best
        # The recent steps no longer say what a step costs: either the count changed, or it
        # stood and the slowdown that set off the comparison was the step's own (a longer
        # context, another conversation's): against the old median, every later step would
        # set off another comparison, each running steps at the slower count (eight in 96
        # steps when a bench went from 1 to 2,048 slots).
        self._recent.clear()

    def describe(self) -> dict:
        recent = statistics.median(self._recent) if self._recent else None
        return {"threads": self.current,
                "step_ms": round(1000 * recent, 2) if recent is not None else None}
