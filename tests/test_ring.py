"""The K/V ring: anchors, eviction by salience, compaction order and RoPE rebase."""

from __future__ import annotations

import numpy as np
import pytest

from engine.conversation import Conversation
from engine.model.rope import rotate_pairs
from engine.state.rebase import rebase
from engine.state.ring import RingFullError
from engine.state.ring_policy import RingPolicy

POLICY = RingPolicy(max_slots=64, recent_window=8, evict_batch=8, prefill_chunk=16)


def feed(conv: Conversation, count: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    vocab = conv.model.config.vocab_size
    for start in range(0, count, 16):
        conv.ingest([int(t) for t in rng.integers(3, vocab, size=min(16, count - start))])


def test_anchors_survive_any_amount_of_traffic(tiny_model) -> None:
    conv = Conversation(tiny_model, POLICY)
    conv.ingest([1, 10, 20, 30, 40], anchors=True)
    v = conv.arena.views()
    k0, v0 = v.k_cache[:, :5].copy(), v.v_cache[:, :5].copy()
    feed(conv, 2000)  # 30x the ring and 8x the tiny model's 256-position context
    ring = conv.ring
    assert ring.n_anchors == 5
    assert ring.evicted > 0 and ring.rebases > 0
    assert ring.total_ingested == 2005
    np.testing.assert_array_equal(v.k_cache[:, :5], k0)  # anchors sit at positions 0..4
    np.testing.assert_array_equal(v.v_cache[:, :5], v0)
    assert list(v.slot_pos[:5]) == [0, 1, 2, 3, 4]


def test_ring_stays_compact_ordered_and_inside_the_context(tiny_model) -> None:
    conv = Conversation(tiny_model, POLICY)
    conv.ingest([1, 2, 3], anchors=True)
    ctx = tiny_model.config.context_length
    for round_ in range(40):
        feed(conv, 37, seed=round_)
        v, n = conv.arena.views(), conv.ring.n_active
        assert n <= POLICY.max_slots
        assert v.slot_active[:n].all() and not v.slot_active[n:].any()
        clocks, pos = v.slot_clock[:n].astype(np.int64), v.slot_pos[:n]
        assert (np.diff(clocks) > 0).all(), "slots stay in ingest order"
        assert (np.diff(pos) > 0).all() and pos.max() < ctx
        assert conv.ring.next_pos <= ctx
        # The recent window is never evicted: the newest slots are the newest tokens.
        newest = conv.ring.clock
        assert list(clocks[-POLICY.recent_window :]) == list(
            range(newest - POLICY.recent_window + 1, newest + 1)
        )


def test_eviction_removes_the_least_salient_slots(tiny_model) -> None:
    conv = Conversation(tiny_model, POLICY)
    conv.ingest([1, 2], anchors=True)
    feed(conv, POLICY.max_slots - 2)  # exactly full
    v = conv.arena.views()
    n = conv.ring.n_active
    assert n == POLICY.max_slots
    candidates = slice(2, n - POLICY.recent_window)
    sal = v.slot_salience[candidates].copy()
    clocks = v.slot_clock[candidates].copy()
    k = max(1, POLICY.evict_batch)
    expected_victims = set(clocks[np.argsort(sal, kind="stable")[:k]].tolist())
    conv.ring.reserve(1)  # forces one eviction batch
    survivors = set(v.slot_clock[: conv.ring.n_active].tolist())
    assert conv.ring.n_active == n - k
    assert expected_victims.isdisjoint(survivors)
    assert set(clocks.tolist()) - expected_victims <= survivors


def test_salience_is_normalised_and_decays(tiny_model) -> None:
    conv = Conversation(tiny_model, POLICY)
    conv.ingest([5, 6, 7, 8])
    v = conv.arena.views()
    # One pass of 4 query tokens hands out exactly 4.0 of mass per layer and head.
    assert v.slot_salience[:4].sum() == pytest.approx(4.0, rel=1e-5)
    before = v.slot_salience[:4].copy()
    conv.forward.decode_one_token(9)
    decayed = before * POLICY.salience_decay
    assert (v.slot_salience[:4] >= decayed - 1e-6).all()
    assert v.slot_salience[:5].sum() == pytest.approx(decayed.sum() + 1.0, rel=1e-5)


def test_rebase_rerotated_keys_equal_keys_rotated_fresh(tiny_model) -> None:
    conv = Conversation(tiny_model, POLICY)
    cfg, rope = tiny_model.config, tiny_model.rope
    n, kvh, hd = 40, cfg.n_kv_heads, cfg.head_dim
    rng = np.random.default_rng(7)
    raw = rng.standard_normal((cfg.n_layers, n, kvh, hd)).astype(np.float32)
    old_pos = np.sort(rng.choice(np.arange(3, cfg.context_length), n, replace=False))
    old_pos[:3] = [0, 1, 2]

    def rotated(positions):
        keys = raw.copy()
        # As Rope.fill_rows computes a pass's rows: float64 angles, rounded once.
        angle = np.multiply.outer(positions.astype(np.float64), rope.inv_freq)[:, None, :]
        cos, sin = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)
        a = np.empty((n, kvh, hd // 2), np.float32)
        b = np.empty_like(a)
        for layer in keys:
            rotate_pairs(layer, cos, sin, a, b)
        return keys.reshape(cfg.n_layers, n, kvh * hd)

    v = conv.arena.views()
    v.k_cache[:, :n] = rotated(old_pos)
    v.slot_pos[:n] = old_pos
    v.slot_active[:n] = 1
    v.ring_counters[0], v.ring_counters[3] = n, int(old_pos[-1]) + 1  # n_active, next_pos
    rebase(conv.ring)
    np.testing.assert_allclose(v.k_cache[:, :n], rotated(np.arange(n)), atol=2e-5, rtol=0)
    assert list(v.slot_pos[:n]) == list(range(n))
    assert conv.ring.next_pos == n and conv.ring.rebases == 1


def test_oversized_admission_is_refused_with_a_reason(tiny_model) -> None:
    conv = Conversation(tiny_model, POLICY)
    with pytest.raises(RingFullError, match="cannot admit"):
        conv.ring.reserve(POLICY.max_slots)
