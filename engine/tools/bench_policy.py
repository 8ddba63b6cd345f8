"""What each eviction policy's bookkeeping costs per decoded token, against decode itself.

A policy does two things (engine/state/evict_policy.py): it folds every pass's attention mass
into the slots' scores (once per token in decode), and it picks the victims when the ring is
full (once per `evict_batch` tokens). Both run on the arena's own views; here they are timed
on a full ring of the conversation's real size (for `turns`, holding the most turns the ring
records, every other one short), and their per-token cost is set against the decode step at
the same ring fill (`decode_tok_s_ring4000`). The issue's target: at most 3%.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

import numpy as np

from ..backends.base import Backend
from ..model.model import Model
from ..state.arena import MAX_TURN_BOUNDARIES, StateArena, conversation_layout
from ..state.evict_policy import TurnSpans, choose_victims, update_scores
from ..state.ring_policy import EVICT_POLICIES, RingPolicy


def _per_call_s(fn: Callable[[], None], calls: int, batches: int = 5) -> float:
    """Median over `batches` of the mean time per call: the machine is shared and noisy."""
    fn()  # warm-up
    means = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls // batches):
            fn()
        means.append((time.perf_counter() - t0) / (calls // batches))
    return statistics.median(means)


def _turns_over(m: int, short: int) -> TurnSpans:
    """MAX_TURN_BOUNDARIES turns spread over m candidates, alternately short and long."""
    firsts = np.linspace(0, m, MAX_TURN_BOUNDARIES, endpoint=False).astype(np.int64)
    tokens = np.where(np.arange(MAX_TURN_BOUNDARIES) % 2, short, 4 * short).astype(np.int64)
    return TurnSpans(firsts, tokens)


def bench_policy_bookkeeping(model: Model, backend: Backend, decode_tok_s: float,
                             calls: int = 200) -> dict:
    """{policy: {"update_us", "choose_us", "per_token_us", "share_of_decode"}} for a full ring
    of the default size."""
    base = RingPolicy.for_model(model.config)
    arena = StateArena(conversation_layout(model.config, base, backend.kv_format))
    v = arena.views()
    n = base.max_slots - 1  # one slot free: a decode step's ring
    m = n - base.recent_window  # victim candidates (no anchors)
    scores, mass = v.slot_salience[: n + 1], v.mass[: n + 1]
    turns = _turns_over(m, base.short_turn)
    rng = np.random.default_rng(0)
    result = {}
    for name in EVICT_POLICIES:
        policy = dataclasses.replace(base, evict=name)
        scores[:] = rng.random(n + 1, dtype=np.float32)

        def update(policy: RingPolicy = policy) -> None:
            mass[:] = 1.0 / (n + 1)
            update_scores(policy, scores, mass, n, 1, 1.0)

        def choose(policy: RingPolicy = policy) -> None:
            choose_victims(policy, scores[:m], policy.evict_batch, v.evict_mask[:m],
                           v.evict_sorted[:m], v.keep_mask[:m], v.tie_rank[:m], turns,
                           v.evict_key[:m])

        update_s, choose_s = _per_call_s(update, calls), _per_call_s(choose, calls)
        per_token_s = update_s + choose_s / policy.evict_batch
        result[name] = {"update_us": round(update_s * 1e6, 2),
                        "choose_us": round(choose_s * 1e6, 2),
                        "per_token_us": round(per_token_s * 1e6, 2),
                        "share_of_decode": round(per_token_s * decode_tok_s, 5)}
    return result
