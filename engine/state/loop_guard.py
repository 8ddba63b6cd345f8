"""The loop guard: stop a reply that has fallen into repeating itself.

A small model decoding greedily (or with little repetition control) can fall into a cycle:
"la femme au martyre, la femme au martyre, ..." until the token cap. The guard watches the
reply's newest tokens for an exact cycle: the same run of `period` tokens, over and over.
It fires when the repeating tail is at least MIN_REPEATS cycles long and covers at least
MIN_SPAN tokens, whatever the sampler settings; the reply then stops with
`stop: "repetition"`.

Why these thresholds: legitimate text repeats too, but rarely exactly and for long. A
numbered list differs in its numbers ("1. a\n2. b\n" has no period); code repeats a line a
few times. A real loop of a short phrase is caught within a few lines (64 tokens). Periods up
to MAX_PERIOD = 64 tokens are watched (a looping paragraph of that length is caught after
its fourth copy). A cycle with no letter in it (an array of zeros, a matrix of them, a table's
rule, a line of dashes) is structure more often than a loop: it must cover STRUCTURE_SPAN
tokens before the guard fires, so that "\n\n\n..." forever is still stopped.

Per token the check is one comparison per period, on a list of run lengths it keeps: the
number of newest positions i where token[i] == token[i - period]. A tail is periodic with
that period over run + period tokens.
"""

from __future__ import annotations

from functools import lru_cache

from ..model.tokenizer import Tokenizer

MAX_PERIOD = 64
MIN_REPEATS = 4
MIN_SPAN = 64
STRUCTURE_SPAN = 256


@lru_cache(maxsize=8)
def letterless_tokens(tokenizer: Tokenizer) -> frozenset[int]:
    """The tokens whose text holds no letter: digits, punctuation, spaces, symbols."""
    return frozenset(tid for tid, text in enumerate(tokenizer.token_texts())
                     if not any(ch.isalpha() for ch in text))


class LoopGuard:
    def __init__(self, tokenizer: Tokenizer | None = None, max_period: int = MAX_PERIOD,
                 min_repeats: int = MIN_REPEATS, min_span: int = MIN_SPAN,
                 structure_span: int = STRUCTURE_SPAN) -> None:
        """`tokenizer` says which tokens have no letter (looked up the first time a cycle
        needs it: a pass over the vocabulary); without one, every cycle counts as words."""
        if max_period < 1 or min_repeats < 2 or not 2 <= min_span <= structure_span:
            raise ValueError("a loop guard needs max_period >= 1, min_repeats >= 2 and "
                             "2 <= min_span <= structure_span")
        self.tokenizer = tokenizer
        self.max_period = max_period
        self.min_repeats = min_repeats
        self.min_span = min_span
        self.structure_span = structure_span
        self._tokens: list[int] = []
        self._runs = [0] * (max_period + 1)  # index: period
        self.period = 0  # the cycle's length once the guard has fired

    def reset(self) -> None:
        self._tokens.clear()
        for p in range(len(self._runs)):
            self._runs[p] = 0
        self.period = 0

    def push(self, token: int) -> bool:
        """Take the reply's next token; True once the reply is looping."""
        tokens, runs = self._tokens, self._runs
        tokens.append(token)
        n = len(tokens)
        for p in range(1, min(self.max_period, n - 1) + 1):
            if tokens[n - 1 - p] == token:
                runs[p] += 1
                span = runs[p] + p
                if span >= self.min_span and span >= self.min_repeats * p \
                        and (span >= self.structure_span or not self._structure(p)):
                    self.period = p
                    return True
            else:
                runs[p] = 0
        return False

    def _structure(self, period: int) -> bool:
        """Whether the newest cycle of `period` tokens has no letter in it."""
        if self.tokenizer is None:
            return False
        letterless, tokens = letterless_tokens(self.tokenizer), self._tokens
        return all(tokens[i] in letterless for i in range(len(tokens) - period, len(tokens)))

    @property
    def looping_tokens(self) -> int:
        """How many of the newest tokens are the cycle (0 before the guard fired)."""
        return self._runs[self.period] + self.period if self.period else 0
