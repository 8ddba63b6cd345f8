"""Next-token sampling: greedy, temperature, top-k and top-p, from a seeded PCG64.

The generator's state is part of the conversation's state: it is mirrored into the arena's
`sampler_state` after every draw, so a snapshot taken between tokens resumes the same stream
of random numbers. Every step writes into arena scratch; only the RNG's own state dict is a
Python object.
"""

from __future__ import annotations

import numpy as np

from .arena import ArenaViews
from .sampling import SamplingSettings

__all__ = ["Sampler", "SamplingSettings"]

MASK64 = (1 << 64) - 1


class Sampler:
    def __init__(self, seed: int = 0):
        self._bitgen = np.random.PCG64(seed)

    def seed(self, views: ArenaViews, seed: int) -> None:
        self._bitgen = np.random.PCG64(seed)
        self.save_state(views)

    def save_state(self, views: ArenaViews) -> None:
        st = self._bitgen.state
        s, inc = st["state"]["state"], st["state"]["inc"]
        words = views.sampler_state
        words[0], words[1] = s >> 64, s & MASK64
        words[2], words[3] = inc >> 64, inc & MASK64
        words[4], words[5] = st["has_uint32"], st["uinteger"]

    def load_state(self, views: ArenaViews) -> None:
        w = [int(x) for x in views.sampler_state]
        if w[2] == 0 and w[3] == 0:  # a fresh arena: no generator saved yet
            self.save_state(views)
            return
        self._bitgen.state = {
            "bit_generator": "PCG64",
            "state": {"state": (w[0] << 64) | w[1], "inc": (w[2] << 64) | w[3]},
            "has_uint32": w[4],
            "uinteger": w[5],
        }

    def sample(self, views: ArenaViews, settings: SamplingSettings,
               logits: np.ndarray | None = None) -> int:
        """Draw the next token from `logits` (default: the arena's; a GPU backend passes its
        host-cached mirror, since reading device memory from the CPU is slow)."""
        logits = views.logits if logits is None else logits
        if settings.temperature == 0.0:
            return int(np.argmax(logits))
        probs = views.probs
        np.multiply(logits, 1.0 / settings.temperature, out=probs)
        vocab = probs.shape[0]
        if 0 < settings.top_k < vocab:
            ranked = views.sorted_probs
            np.copyto(ranked, probs)
            ranked.partition(vocab - settings.top_k)
            kth = float(ranked[vocab - settings.top_k])
            np.putmask(probs, probs < kth, -np.inf)
        probs -= probs.max()
        np.exp(probs, out=probs)
        probs /= float(probs.sum())
        if settings.top_p < 1.0:
            ranked, cum = views.sorted_probs, views.cum_probs
            np.negative(probs, out=ranked)  # sort descending by sorting the negation
            ranked.sort()
            np.negative(ranked, out=ranked)
            np.cumsum(ranked, out=cum)
            cutoff_index = int(np.searchsorted(cum, settings.top_p))
            cutoff = float(ranked[min(cutoff_index, vocab - 1)])
            np.putmask(probs, probs < cutoff, 0.0)
            probs /= float(probs.sum())
        cum = views.cum_probs
        np.cumsum(probs, out=cum)
        draw = float(self._bitgen.random_raw()) / 2.0**64 * float(cum[-1])
        self.save_state(views)
        return int(min(np.searchsorted(cum, draw, side="right"), vocab - 1))
