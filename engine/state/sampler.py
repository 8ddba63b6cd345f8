"""Next-token sampling: llama.cpp's sampler chain, drawn from a seeded PCG64.

The chain runs in llama.cpp's default order: penalties (repetition, presence, frequency),
DRY, top-k, typical-p, top-p, min-p, XTC, temperature, then the draw. Penalties and DRY edit
the whole vocabulary's logits; top-k (or a sort of the whole vocabulary when no top-k is set
and a later stage needs order) then makes the candidate list the other stages cut
(sampler_stages.py). Temperature 0 is greedy: the argmax of the model's logits, with no stage
applied, so that greedy stays the model's own choice (llama.cpp still applies its penalties
before a greedy pick).

Every reply is seeded: with the seed its request gave, else with one drawn from the
conversation's generator. The seed is recorded with the reply (session/answering.py), so the
reply can be reproduced from the state before it. The generator's state is part of the
conversation's state: it is mirrored into the arena's `sampler_state` after every draw, so a
snapshot resumes the same stream of seeds. Every step writes into arena scratch.
"""

from __future__ import annotations

import numpy as np

from ..model.tokenizer import Tokenizer
from . import sampler_stages as stages
from .arena import ArenaViews
from .dry import BreakerTable, apply_dry, breaker_table
from .penalties import RecentTokens, apply_penalties, f32
from .sampling import SamplingSettings

__all__ = ["Sampler", "SamplingSettings"]

MASK64 = (1 << 64) - 1


class Sampler:
    def __init__(self, seed: int = 0, tokenizer: Tokenizer | None = None):
        self._bitgen = np.random.PCG64(seed)
        self._tokenizer = tokenizer  # for DRY's sequence breakers; None: no breakers
        self.recent = RecentTokens()  # the reply so far, and its penalty window

    # The generator and its mirror in the arena.

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

    def _uniform(self, views: ArenaViews) -> float:
        """A draw in [0, 1), mirrored into the arena at once."""
        u = float(self._bitgen.random_raw()) / 2.0**64
        self.save_state(views)
        return u

    # One reply.

    def begin_reply(self, views: ArenaViews, settings: SamplingSettings) -> int | None:
        """Seed the reply: returns the seed it uses (None for a greedy reply, which draws
        nothing). Without a seed in `settings`, one is drawn from the conversation's
        generator as the arena holds it."""
        self.recent.reset(settings.repeat_last_n if settings.penalties_on else 0)
        self.load_state(views)
        if settings.greedy:
            return None
        seed = settings.seed
        if seed is None:
            seed = int(self._bitgen.random_raw())
        self.seed(views, seed)
        return seed

    def accept(self, token: int) -> None:
        """The reply took `token`: the penalty and DRY windows move on."""
        self.recent.accept(token)

    def sample(self, views: ArenaViews, settings: SamplingSettings,
               logits: np.ndarray | None = None) -> int:
        """Draw the next token from `logits` (default: the arena's; a GPU backend passes its
        host-cached mirror, since reading device memory from the CPU is slow)."""
        logits = views.logits if logits is None else logits
        if settings.greedy:
            return int(np.argmax(logits))
        ids, probs = self.distribution(views, settings, logits)
        cum = views.cand_cum[: probs.shape[0]]
        np.cumsum(probs, out=cum)
        # A float32 draw: searching a float32 array for a Python float converts the array.
        draw = np.float32(self._uniform(views) * float(cum[-1]))
        pick = int(np.searchsorted(cum, draw, side="right"))
        pick = min(pick, probs.shape[0] - 1)
        return pick if ids is None else int(ids[pick])

    def distribution(self, views: ArenaViews, settings: SamplingSettings,
                     logits: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """What the draw picks from, after every stage of a sampled (not greedy) chain:
        (candidate ids, their probabilities), or (None, the whole vocabulary's probabilities
        by id) when no stage needs the candidates in order. Views of arena scratch."""
        work = views.sample_logits
        np.copyto(work, logits)
        apply_penalties(work, self.recent, settings)
        if settings.dry_on:
            apply_dry(work, self.recent.tokens, settings, self._breakers(settings))
        vocab = work.shape[0]
        ordered = settings.typical_p < 1.0 or settings.top_p < 1.0 or settings.min_p > 0.0 \
            or settings.xtc_on
        if not ordered and not 0 < settings.top_k < vocab:  # temperature alone: no sort
            np.divide(work, np.float32(f32(settings.temperature)), out=work)
            work -= work.max()
            np.exp(work, out=work)
            np.divide(work, work.sum(dtype=np.float32), out=work)
            return None, work
        n = stages.select_top(views, work, settings.top_k)
        if settings.typical_p < 1.0:
            n = stages.typical_p(views, n, f32(settings.typical_p))
        if settings.top_p < 1.0:
            n = stages.top_p(views, n, f32(settings.top_p))
        if settings.min_p > 0.0:
            n = stages.min_p(views, n, f32(settings.min_p))
        start = 0
        if settings.xtc_on and n > 1 and self._uniform(views) <= f32(settings.xtc_probability):
            start = stages.xtc(views, n, f32(settings.xtc_threshold))
        stages.temperature(views, start, n, f32(settings.temperature))
        return views.cand_id[start:n], stages.softmax(views, start, n)

    def _breakers(self, settings: SamplingSettings) -> BreakerTable:
        if self._tokenizer is None:
            return {}
        return breaker_table(self._tokenizer, settings.dry_sequence_breakers)
