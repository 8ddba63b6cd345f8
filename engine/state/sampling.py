"""Sampling settings and their ranges, in a module light enough for the protocol layer.

A turn's settings are checked here once, when its request is parsed (process/protocol.py), so
a bad value is refused before anything is logged; the sampler (sampler.py) can then trust
them. Standard library only: clients import the protocol module without numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_TEMPERATURE = 100.0
# Below this, logits / temperature overflows float32 (about 3.4e38) for ordinary logits.
MIN_TEMPERATURE = 1e-4
MAX_TOP_K = (1 << 31) - 1
SEED_LIMIT = 1 << 64  # seeds are 64-bit: 0 <= seed < 2**64
MAX_REPLY_TOKENS = 1 << 16  # the most tokens one reply may ask for


@dataclass(frozen=True)
class SamplingSettings:
    temperature: float = 0.0  # 0 means greedy
    top_k: int = 0  # 0 disables
    top_p: float = 1.0  # 1 disables
    seed: int | None = None  # reseed the generator for this turn

    def __post_init__(self) -> None:
        t = self.temperature
        if not (t == 0.0 or (math.isfinite(t) and MIN_TEMPERATURE <= t <= MAX_TEMPERATURE)):
            raise ValueError(f"temperature must be 0 (greedy) or from {MIN_TEMPERATURE:g} to "
                             f"{MAX_TEMPERATURE:g}, got {t}")
        if not 0 <= self.top_k <= MAX_TOP_K:
            raise ValueError(f"top_k must be from 0 to {MAX_TOP_K}, got {self.top_k}")
        if not (math.isfinite(self.top_p) and 0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.seed is not None and not 0 <= self.seed < SEED_LIMIT:
            raise ValueError(f"seed must be from 0 to 2**64 - 1, got {self.seed}")
