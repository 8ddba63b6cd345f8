"""Repetition, presence and frequency penalties over the newest tokens of a reply, as
llama.cpp's penalties sampler defines them (src/llama-sampling.cpp).

A token seen c > 0 times among the last `repeat_last_n`: its logit is divided by the repeat
penalty when positive and multiplied by it otherwise (dividing a negative logit would make the
token likelier), then lowered by c * frequency_penalty + presence_penalty.

The window is the reply's own tokens, not the prompt's: a reply is then a function of the
state before it, its settings and its seed alone, which is what a regenerate, a replay and a
warm boot need to reproduce it; and the turn's markup (an end-of-turn token in the prompt)
is never penalized, which would keep replies from ending. llama.cpp's server also feeds the
prompt into the window.
"""

from __future__ import annotations

import numpy as np

from .sampling import WHOLE_REPLY, SamplingSettings


def f32(x: float) -> float:
    """`x` rounded to float32, as llama.cpp holds every setting."""
    return float(np.float32(x))


class RecentTokens:
    """How often each token occurs among the reply's newest `last_n` tokens, kept as tokens
    are accepted (a dict of at most last_n entries: llama.cpp's token_count)."""

    def __init__(self) -> None:
        self.tokens: list[int] = []  # the whole reply so far, oldest first
        self.counts: dict[int, int] = {}
        self.last_n = 0

    def reset(self, last_n: int) -> None:
        self.tokens.clear()
        self.counts.clear()
        self.last_n = last_n

    def accept(self, token: int) -> None:
        self.tokens.append(token)
        if self.last_n == 0:
            return
        self.counts[token] = self.counts.get(token, 0) + 1
        if self.last_n != WHOLE_REPLY and len(self.tokens) > self.last_n:
            old = self.tokens[-self.last_n - 1]
            left = self.counts[old] - 1
            if left:
                self.counts[old] = left
            else:
                del self.counts[old]


def apply_penalties(logits: np.ndarray, recent: RecentTokens, s: SamplingSettings) -> None:
    """Penalize, in place, every token of `logits` (the whole vocabulary) seen recently."""
    if not s.penalties_on or not recent.counts:
        return
    repeat, freq, present = f32(s.repeat_penalty), f32(s.frequency_penalty), \
        f32(s.presence_penalty)
    for token, count in recent.counts.items():
        logit = float(logits[token])
        logit = logit * repeat if logit <= 0.0 else logit / repeat
        logits[token] = logit - (count * freq + present)
