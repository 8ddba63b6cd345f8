"""DRY ("don't repeat yourself"), as llama.cpp's DRY sampler defines it (src/llama-sampling.cpp,
ported there from KoboldCpp; designed by p-e-w).

If the reply's newest tokens repeat an earlier run of it, the token that came after that run
would extend the repeat; once the repeat is longer than `dry_allowed_length`, that token's
logit is lowered by multiplier * base ** (length - allowed_length). A repeat never runs
across a sequence breaker ("\\n", ":", "\\"", "*" by default), so lists and dialogue stay free.

Breakers are strings; a token ends the repeat if its text holds a breaker, or if its text ends
with the start of one and the next tokens spell the rest (llama.cpp's "head token plus tail").
That table is built once per tokenizer and breaker list (a pass over the vocabulary). As with
the penalties (penalties.py), the window is the reply's own tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from ..model.tokenizer import Tokenizer
from .penalties import f32
from .sampling import WHOLE_REPLY, SamplingSettings

BreakerTable = dict[int, tuple[tuple[int, ...], ...]]  # head token -> tails (() alone: itself)
MAX_BREAKER_CHARS = 40  # llama.cpp's caps on a breaker and on its tail's tokens
MAX_TAIL_TOKENS = 20
FLOAT_MAX_LOG = 88.7228391  # log of float32's largest value: caps the exponent


@lru_cache(maxsize=8)
def breaker_table(tokenizer: Tokenizer, breakers: tuple[str, ...]) -> BreakerTable:
    """Which tokens start a sequence breaker, and with which following tokens."""
    table: dict[int, list[tuple[int, ...]]] = {}
    texts = tokenizer.token_texts()
    for breaker in breakers:
        breaker = breaker[:MAX_BREAKER_CHARS]
        for token, word in enumerate(texts):
            for tail in _tails(tokenizer, word, breaker):
                tails = table.setdefault(token, [])
                if tail not in tails:
                    tails.append(tail)
    return {token: tuple(tails) for token, tails in table.items()}


def _tails(tokenizer: Tokenizer, word: str, breaker: str) -> list[tuple[int, ...]]:
    """() if `word` holds the breaker; else, for each way `word` ends with the breaker's start,
    the tokens of the breaker's rest."""
    if breaker in word:
        return [()]
    tails = []
    pos = word.find(breaker[0])
    while pos != -1:
        overlap = len(word) - pos
        if overlap < len(breaker) and word[pos:] == breaker[:overlap]:
            rest = tokenizer.encode(breaker[overlap:], parse_special=False)
            tails.append(tuple(rest[:MAX_TAIL_TOKENS]))
        pos = word.find(breaker[0], pos + 1)
    return tails


def apply_dry(logits: np.ndarray, reply: Sequence[int], s: SamplingSettings,
              breakers: BreakerTable) -> None:
    """Lower, in place, the logits (the whole vocabulary) of tokens that would extend a
    repeat of the reply's newest tokens."""
    if not s.dry_on:
        return
    allowed = s.dry_allowed_length
    window = len(reply) if s.dry_penalty_last_n == WHOLE_REPLY else s.dry_penalty_last_n
    n = min(len(reply), window)
    if n <= allowed:
        return
    end = len(reply) - 1

    def rat(i: int) -> int:  # the i-th newest token
        return reply[end - i]

    limit = _repeat_limit(rat, n, breakers)
    if limit < allowed:
        return
    counts = _suffix_repeats(rat, n, limit)
    longest: dict[int, int] = {}  # token -> longest repeat it would extend
    for i in range(n - 1):
        length = counts[i]
        if length >= allowed:
            token = rat(n - 2 - i)
            if longest.get(token, -1) < length:
                longest[token] = length
    multiplier, base = f32(s.dry_multiplier), f32(s.dry_base)
    max_exponent = int(FLOAT_MAX_LOG / math.log(base)) if base > 1.000001 else 0
    for token, length in longest.items():
        if () in breakers.get(token, ()):
            continue  # a breaker itself is never penalized
        exponent = length - allowed
        if 0 < max_exponent < exponent:
            exponent = max_exponent
        logits[token] = float(logits[token]) - multiplier * base ** exponent


def _repeat_limit(rat, n: int, breakers: BreakerTable) -> int:
    """How far back a repeat may reach: up to the newest sequence breaker."""
    for i in range(n):
        tails = breakers.get(rat(i))
        if not tails:
            continue
        longest = -1
        for tail in tails:
            if longest < len(tail) <= i and all(tail[k] == rat(i - k - 1)
                                                for k in range(len(tail))):
                longest = len(tail)
        if longest >= 0:
            return i - longest
    return n


def _suffix_repeats(rat, n: int, limit: int) -> list[int]:
    """counts[n - 1 - k]: how many of the newest tokens also end k tokens earlier (capped at
    `limit`), by the Z-algorithm run backwards, as llama.cpp does."""
    counts = [0] * n
    last = n - 1
    lt = rt = 0
    for k in range(1, n):
        if k > rt:
            m = 0
            while m + k < n and rat(m) == rat(m + k):
                m += 1
            counts[last - k] = min(m, limit)
            if m > 0:
                lt, rt = k, k + m - 1
        else:
            p = k - lt
            right = rt - k + 1
            if counts[last - p] < right:
                counts[last - k] = min(counts[last - p], limit)
            else:
                i = rt + 1
                while i < n and rat(i) == rat(i - k):
                    i += 1
                counts[last - k] = min(i - k, limit)
                lt, rt = k, i - 1
    return counts
