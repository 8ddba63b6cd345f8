"""Sampling settings and their ranges, in a module light enough for the protocol layer.

A turn's settings are checked here once, when its request is parsed (process/protocol.py), so
a bad value is refused before anything is logged; the sampler (sampler.py) can then trust
them. Standard library only: clients import the protocol module without numpy.

The dataclass's own defaults are neutral: `SamplingSettings()` is plain greedy decoding with
every stage off, which is what tests and tools that want the model's own argmax ask for. What
a person gets when they ask for nothing is sampling_defaults.py's `defaults_for(...)`: the
GGUF's recommended values where it has them, else llama.cpp's defaults plus a mild repetition
penalty.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

MAX_TEMPERATURE = 100.0
# Below this, logits / temperature overflows float32 (about 3.4e38) for ordinary logits.
MIN_TEMPERATURE = 1e-4
MAX_TOP_K = (1 << 31) - 1
SEED_LIMIT = 1 << 64  # seeds are 64-bit: 0 <= seed < 2**64
MAX_REPLY_TOKENS = 1 << 16  # the most tokens one reply may ask for
MAX_REPEAT_PENALTY = 10.0  # a logit divided (or multiplied) by more is simply banned
MAX_ADDITIVE_PENALTY = 100.0  # presence / frequency penalties and the DRY multiplier
MAX_DRY_BASE = 100.0
WHOLE_REPLY = -1  # a *_last_n of -1: every token of the reply so far (llama.cpp's "context")
# llama.cpp's default DRY sequence breakers: a repeat never runs across one of these.
DRY_BREAKERS = ("\n", ":", "\"", "*")


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _in_range(name: str, value: float, low: float, high: float) -> None:
    _check(math.isfinite(value) and low <= value <= high,
           f"{name} must be from {low:g} to {high:g}, got {value}")


def _last_n(name: str, value: int) -> None:
    _check(value == WHOLE_REPLY or 0 <= value <= MAX_REPLY_TOKENS,
           f"{name} must be -1 (the whole reply) or from 0 to {MAX_REPLY_TOKENS}, got {value}")


@dataclass(frozen=True)
class SamplingSettings:
    """One reply's sampler chain, stage by stage in llama.cpp's order (sampler.py); each
    field's neutral value turns its stage off."""

    temperature: float = 0.0  # 0 means greedy: the argmax of the model's logits, nothing else
    top_k: int = 0  # 0 disables
    top_p: float = 1.0  # 1 disables
    seed: int | None = None  # this reply's seed; None: drawn from the conversation's generator
    min_p: float = 0.0  # 0 disables; keeps tokens with p >= min_p * p_max
    typical_p: float = 1.0  # 1 disables (locally typical sampling)
    repeat_penalty: float = 1.0  # 1 disables; over the last repeat_last_n tokens
    repeat_last_n: int = 64  # 0 disables the three penalties, -1: the whole reply
    presence_penalty: float = 0.0  # subtracted once from a token seen in the window
    frequency_penalty: float = 0.0  # subtracted per occurrence in the window
    dry_multiplier: float = 0.0  # 0 disables DRY ("don't repeat yourself")
    dry_base: float = 1.75
    dry_allowed_length: int = 2  # repeats up to this long are free
    dry_penalty_last_n: int = WHOLE_REPLY  # 0 disables DRY, -1: the whole reply
    dry_sequence_breakers: tuple[str, ...] = DRY_BREAKERS
    xtc_probability: float = 0.0  # 0 disables XTC ("exclude top choices")
    xtc_threshold: float = 0.1  # above 0.5 XTC does nothing (llama.cpp)

    def __post_init__(self) -> None:
        t = self.temperature
        _check(t == 0.0 or (math.isfinite(t) and MIN_TEMPERATURE <= t <= MAX_TEMPERATURE),
               f"temperature must be 0 (greedy) or from {MIN_TEMPERATURE:g} to "
               f"{MAX_TEMPERATURE:g}, got {t}")
        _check(0 <= self.top_k <= MAX_TOP_K, f"top_k must be from 0 to {MAX_TOP_K}, got "
                                             f"{self.top_k}")
        _check(math.isfinite(self.top_p) and 0.0 < self.top_p <= 1.0,
               f"top_p must be in (0, 1], got {self.top_p}")
        _check(self.seed is None or 0 <= self.seed < SEED_LIMIT,
               f"seed must be from 0 to 2**64 - 1, got {self.seed}")
        _in_range("min_p", self.min_p, 0.0, 1.0)
        _check(math.isfinite(self.typical_p) and 0.0 < self.typical_p <= 1.0,
               f"typical_p must be in (0, 1], got {self.typical_p}")
        _check(math.isfinite(self.repeat_penalty)
               and 0.0 < self.repeat_penalty <= MAX_REPEAT_PENALTY,
               f"repeat_penalty must be in (0, {MAX_REPEAT_PENALTY:g}], got "
               f"{self.repeat_penalty}")
        _last_n("repeat_last_n", self.repeat_last_n)
        for name in ("presence_penalty", "frequency_penalty"):
            _in_range(name, getattr(self, name), -MAX_ADDITIVE_PENALTY, MAX_ADDITIVE_PENALTY)
        _in_range("dry_multiplier", self.dry_multiplier, 0.0, MAX_ADDITIVE_PENALTY)
        _in_range("dry_base", self.dry_base, 1.0, MAX_DRY_BASE)
        _check(0 <= self.dry_allowed_length <= MAX_REPLY_TOKENS,
               f"dry_allowed_length must be from 0 to {MAX_REPLY_TOKENS}, got "
               f"{self.dry_allowed_length}")
        _last_n("dry_penalty_last_n", self.dry_penalty_last_n)
        _check(all(isinstance(b, str) and b for b in self.dry_sequence_breakers),
               "dry_sequence_breakers must be non-empty strings")
        _in_range("xtc_probability", self.xtc_probability, 0.0, 1.0)
        _in_range("xtc_threshold", self.xtc_threshold, 0.0, 1.0)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def penalties_on(self) -> bool:
        return self.repeat_last_n != 0 and (
            self.repeat_penalty != 1.0 or self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0)

    @property
    def dry_on(self) -> bool:
        return self.dry_multiplier > 0.0 and self.dry_penalty_last_n != 0

    @property
    def xtc_on(self) -> bool:
        return self.xtc_probability > 0.0 and self.xtc_threshold <= 0.5

    def with_overrides(self, overrides: Mapping[str, object]) -> SamplingSettings:
        """These settings with the named fields replaced (checked again as a whole)."""
        return replace(self, **overrides) if overrides else self

    def record(self) -> dict[str, object]:
        """What a reply's stream event keeps of these settings: temperature, top_k and top_p
        always (as before), the rest where they differ from neutral. Not the seed: the event
        records the seed that was used, which a request may not have given."""
        kept: dict[str, object] = {"temperature": self.temperature, "top_k": self.top_k,
                                   "top_p": self.top_p}
        for f in fields(self):
            if f.name in kept or f.name == "seed":
                continue
            value = getattr(self, f.name)
            if value != getattr(NEUTRAL, f.name):
                kept[f.name] = list(value) if isinstance(value, tuple) else value
        return kept

    @classmethod
    def from_record(cls, record: Mapping[str, object]) -> SamplingSettings:
        """The settings a stream event recorded (record()), with its seed, if it has one."""
        names = {f.name for f in fields(cls)}
        kept = {k: (tuple(v) if isinstance(v, list) else v) for k, v in record.items()
                if k in names}
        return cls(**kept)


NEUTRAL = SamplingSettings()
# The request fields that set a reply's sampling (protocol.py's REPLY_OPTIONS), with their types.
REQUEST_FIELDS: dict[str, type] = {
    "temperature": float, "top_k": int, "top_p": float, "min_p": float, "typical_p": float,
    "repeat_penalty": float, "repeat_last_n": int, "presence_penalty": float,
    "frequency_penalty": float, "dry_multiplier": float, "dry_base": float,
    "dry_allowed_length": int, "dry_penalty_last_n": int, "xtc_probability": float,
    "xtc_threshold": float, "seed": int,
}


def checked_overrides(given: Mapping[str, object]) -> dict[str, object]:
    """`given` request fields, each checked against its range (ValueError naming the first
    bad one); the engine lays them over the model's defaults when it answers."""
    kept = {k: v for k, v in given.items() if k in REQUEST_FIELDS}
    replace(NEUTRAL, **kept)  # every field's range check, without the model's defaults
    return kept


def another_seed(seed: int) -> int:
    """A seed for answering again what `seed` answered (a regenerate): splitmix64's mix of
    it, so the new reply differs and is still reproducible from the stream."""
    z = (seed + 0x9E37_79B9_7F4A_7C15) % SEED_LIMIT
    z = ((z ^ (z >> 30)) * 0xBF58_476D_1CE4_E5B9) % SEED_LIMIT
    z = ((z ^ (z >> 27)) * 0x94D0_49BB_1331_11EB) % SEED_LIMIT
    return z ^ (z >> 31)
