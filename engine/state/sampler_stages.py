"""The candidate stages of the sampler chain, as llama.cpp's src/llama-sampling.cpp defines
them: top-k, typical-p, top-p, min-p, XTC, temperature, and the softmax they share.

llama.cpp keeps a list of (token, logit, p) that each stage sorts, cuts or reorders. Here the
list is the arena's candidate regions, kept sorted by logit, best first: `cand_logit[:n]` and
`cand_id[:n]`, with `cand_p[:n]` their softmax where a stage needs it. Every stage but
typical-p keeps a prefix of that order (or, XTC, drops one), so a stage returns the new count;
typical-p keeps a set chosen in another order and puts it back in logit order, which changes
nothing a later stage or the draw sees. Nothing here allocates a numpy buffer: sorting is done
on 64-bit keys (order bits << 32 | index) in place, and every other step writes with `out=`.
"""

from __future__ import annotations

import math

import numpy as np

from .arena import ArenaViews

LOW32 = 0xFFFF_FFFF


def _descending_order_bits(values: np.ndarray, out: np.ndarray) -> np.ndarray:
    """uint32 keys whose ascending order is `values`' (float32) descending order.

    A float's bits, with the sign bit set for a positive number and every bit flipped for a
    negative one, compare as unsigned integers in the floats' order; flipped again, in the
    reverse order.
    """
    bits = values.view(np.uint32)
    np.right_shift(bits, 31, out=out)  # 1 for a negative number
    np.multiply(out, 0x7FFF_FFFF, out=out)
    np.bitwise_or(out, 0x8000_0000, out=out)  # negative: all ones; else the sign bit
    np.bitwise_xor(bits, out, out=out)
    np.invert(out, out=out)
    return out


def _pack_keys(order_bits: np.ndarray, index: np.ndarray, keys: np.ndarray) -> np.ndarray:
    np.copyto(keys, order_bits)
    np.left_shift(keys, 32, out=keys)
    np.bitwise_or(keys, index, out=keys)
    return keys


def select_top(v: ArenaViews, logits: np.ndarray, k: int) -> int:
    """The k best of `logits` (the whole vocabulary) into the candidate regions, best first;
    returns k. Equal logits go lowest token id first (llama.cpp leaves their order open)."""
    vocab = logits.shape[0]
    k = min(k, vocab) if k > 0 else vocab
    keys = _pack_keys(_descending_order_bits(logits, v.sample_bits), v.vocab_ids, v.sample_keys)
    if k < vocab:
        keys.partition(k - 1)  # the k smallest keys (the k largest logits) first
    best = keys[:k]
    best.sort()
    ids = v.cand_id[:k]
    np.bitwise_and(best, LOW32, out=ids.view(np.uint64))
    np.take(logits, ids, out=v.cand_logit[:k], mode="clip")  # "raise" would buffer
    return k


def softmax(v: ArenaViews, start: int, n: int) -> np.ndarray:
    """cand_p[start:n] = softmax(cand_logit[start:n]); the candidates are sorted, so the
    first is the largest (llama.cpp's llama_sampler_softmax_impl)."""
    logits, p = v.cand_logit[start:n], v.cand_p[start:n]
    np.subtract(logits, logits[0], out=p)
    np.exp(p, out=p)
    np.divide(p, p.sum(dtype=np.float32), out=p)
    return p


def top_p(v: ArenaViews, n: int, p: float) -> int:
    """Keep the fewest best candidates whose probabilities sum to at least p."""
    cum = v.cand_cum[:n]
    np.cumsum(softmax(v, 0, n), out=cum)
    first = int(np.searchsorted(cum, np.float32(p), side="left"))  # first cum >= p
    return min(first + 1, n)


def min_p(v: ArenaViews, n: int, p: float) -> int:
    """Keep the candidates whose probability is at least p times the best one's: in logits,
    at least the best's plus log(p)."""
    floor = np.float32(v.cand_logit[0]) + np.float32(math.log(p))
    keep = v.cand_mask[:n]
    np.greater_equal(v.cand_logit[:n], floor, out=keep)
    return max(int(np.count_nonzero(keep)), 1)


def typical_p(v: ArenaViews, n: int, p: float) -> int:
    """Locally typical sampling: keep the candidates whose surprise (-log p) is closest to
    the distribution's entropy, in that order, until their probabilities sum to more than p;
    then put them back in logit order."""
    probs = softmax(v, 0, n)
    surprise = v.spare_logit[:n]
    with np.errstate(divide="ignore"):
        np.log(probs, out=surprise)
    np.negative(surprise, out=surprise)  # -log p
    weighted, positive = v.cand_cum[:n], v.cand_mask[:n]
    weighted.fill(0.0)  # a probability that underflowed to 0 adds 0, not 0 * inf
    np.greater(probs, 0.0, out=positive)
    np.multiply(probs, surprise, out=weighted, where=positive)
    entropy = weighted.sum(dtype=np.float32)
    np.subtract(surprise, entropy, out=surprise)
    np.abs(surprise, out=surprise)  # shifted scores, >= 0: their bits sort as integers
    keys = _pack_keys(surprise.view(np.uint32), v.vocab_ids[:n], v.sample_keys[:n])
    keys.sort()  # most typical first; ties in logit order
    order = v.spare_id[:n]
    np.bitwise_and(keys, LOW32, out=order.view(np.uint64))
    cum = v.cand_cum[:n]
    np.take(probs, order, out=cum, mode="clip")
    np.cumsum(cum, out=cum)
    kept = min(int(np.searchsorted(cum, np.float32(p), side="right")) + 1, n)  # first > p
    chosen = order[:kept]
    chosen.sort()  # back in logit order
    # Gathered through spare regions: a take into an overlapping output copies its input.
    np.take(v.cand_logit, chosen, out=v.spare_logit[:kept], mode="clip")
    np.copyto(v.cand_logit[:kept], v.spare_logit[:kept])
    ids = v.sample_keys.view(np.int64)[:kept]  # the keys are spent
    np.take(v.cand_id, chosen, out=ids, mode="clip")
    np.copyto(v.cand_id[:kept], ids)
    return kept


def xtc(v: ArenaViews, n: int, threshold: float) -> int:
    """Exclude top choices: of the candidates at least `threshold` likely, all but the least
    likely one go. Returns how many to drop from the front (0: none)."""
    keep = v.cand_mask[:n]
    np.greater_equal(softmax(v, 0, n), np.float32(threshold), out=keep)
    above = int(np.count_nonzero(keep))  # sorted: those above the threshold are a prefix
    return max(above - 1, 0)


def temperature(v: ArenaViews, start: int, n: int, t: float) -> None:
    np.divide(v.cand_logit[start:n], np.float32(t), out=v.cand_logit[start:n])
