"""The sampling a reply gets when nobody asked for any: the model file's recommendation, else
what local chat apps use.

A GGUF may carry its publisher's recommended settings as `general.sampling.*` (the model
loader keeps them by key suffix: engine/model/model.py). Each one it has replaces the base
below; a value out of range is left out (a GGUF is untrusted input: a bad recommendation
must not stop the model from being used). The base is llama.cpp's defaults (temperature 0.8,
top-k 40, top-p 0.95, min-p 0.05) plus Ollama's mild repetition control (penalty 1.1 over the
last 64 tokens): greedy decoding with no repetition control loops on small models.
Standard library only, like sampling.py.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache

from .sampling import NEUTRAL, SamplingSettings

log = logging.getLogger("channel.engine")

BASE_DEFAULTS = replace(NEUTRAL, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05,
                        repeat_penalty=1.1, repeat_last_n=64)

# general.sampling.<suffix> -> the setting it recommends (gguf-py's Keys.General.SAMPLING_*;
# `sequence` and the mirostat keys have no counterpart here and are not read).
GGUF_SAMPLING_KEYS: dict[str, str] = {
    "temp": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "penalty_repeat": "repeat_penalty",
    "penalty_last_n": "repeat_last_n",
    "xtc_probability": "xtc_probability",
    "xtc_threshold": "xtc_threshold",
}
INT_SETTINGS = frozenset({"top_k", "repeat_last_n"})


def defaults_for(recommended: Mapping[str, object] | None = None) -> SamplingSettings:
    """What a reply gets when nobody asked for anything: BASE_DEFAULTS with each usable
    `recommended` value (a GGUF's general.sampling.*, by key suffix: Model's
    recommended_sampling) laid over."""
    recommended = recommended or {}
    usable = tuple(sorted((k, v) for k, v in recommended.items()
                          if k in GGUF_SAMPLING_KEYS and isinstance(v, (int, float))))
    return _laid_over(usable)


@lru_cache(maxsize=64)  # once per model: a bad value is said once, not at every turn
def _laid_over(recommended: tuple[tuple[str, int | float], ...]) -> SamplingSettings:
    settings = BASE_DEFAULTS
    for suffix, value in recommended:
        name = GGUF_SAMPLING_KEYS.get(suffix)
        if name is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if name in INT_SETTINGS:
            if isinstance(value, float) and not value.is_integer():
                continue
            value = int(value)
        else:
            value = float(value)
        try:
            settings = replace(settings, **{name: value})
        except ValueError as exc:
            log.warning("the model's general.sampling.%s is not used: %s", suffix, exc)
    return settings
