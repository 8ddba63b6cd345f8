"""Eviction policies: each forgets what it says, keeps anchors and the recent window, evicts in
batches, survives a snapshot, and runs the same on numpy and ggml."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from engine.allocs import measure_allocations
from engine.conversation import Conversation
from engine.snapshot.chain import restore
from engine.snapshot.restore import read_snapshot
from engine.snapshot.snapshotter import Snapshotter
from engine.state.ring_policy import EVICT_POLICIES, RingPolicy

from .parity import run_steps, tiny

ANCHORS = 2


def crafted(model, evict: str, **kw) -> tuple[Conversation, np.ndarray]:
    """A full ring of 32 slots (2 anchors, a window of 4) with hand-set, distinct scores
    that rise and fall (so the lowest are neither the oldest nor the newest); returns the
    conversation and the candidates' clocks."""
    policy = RingPolicy(**{"max_slots": 32, "recent_window": 4, "evict_batch": 4,
                           "prefill_chunk": 8, "evict": evict, **kw})
    conv = Conversation(model, policy)
    conv.ingest([1, 2], anchors=True)
    conv.ingest([int(t) for t in np.arange(30) % 200 + 3])
    v, n = conv.arena.views(), conv.ring.n_active
    assert n == policy.max_slots
    m = n - ANCHORS - policy.recent_window
    v.slot_salience[ANCHORS : ANCHORS + m] = np.abs(np.arange(m) - m / 2.3) + 1.0
    v.slot_salience[:ANCHORS] = 0.0  # the lowest scores of all, yet never evicted
    v.slot_salience[n - policy.recent_window : n] = 0.0
    return conv, v.slot_clock[ANCHORS : ANCHORS + m].copy()


def survivors(conv: Conversation) -> list[int]:
    return conv.arena.views().slot_clock[: conv.ring.n_active].tolist()


@pytest.mark.parametrize("evict", ["salience", "h2o", "tova"])
def test_score_policies_evict_the_lowest_scores(tiny_model, evict) -> None:
    conv, clocks = crafted(tiny_model, evict)
    scores = conv.arena.views().slot_salience[ANCHORS : ANCHORS + len(clocks)].copy()
    anchors_and_window = [c for c in survivors(conv) if c not in clocks]
    conv.ring.reserve(1)
    victims = set(clocks[np.argsort(scores)[:4]].tolist())
    assert conv.ring.evicted == 4  # a whole batch for one token
    kept = survivors(conv)
    assert victims.isdisjoint(kept)
    assert sorted(set(clocks.tolist()) - victims) == [c for c in kept if c in set(clocks)]
    assert set(anchors_and_window) <= set(kept)


def test_window_evicts_the_oldest_whatever_the_scores(tiny_model) -> None:
    conv, clocks = crafted(tiny_model, "window")
    before = survivors(conv)
    conv.ring.reserve(1)
    assert conv.ring.evicted == 4
    assert survivors(conv) == before[:ANCHORS] + before[ANCHORS + 4 :]
    assert set(clocks[:4].tolist()).isdisjoint(survivors(conv))


@pytest.mark.parametrize("evict", EVICT_POLICIES)
def test_a_large_admission_evicts_what_it_needs_in_one_batch(tiny_model, evict) -> None:
    conv, _ = crafted(tiny_model, evict)
    window = survivors(conv)[-4:]
    conv.ring.reserve(10)  # more than one batch of 4
    assert conv.ring.evicted == 10 and conv.ring.n_active == 22
    kept = survivors(conv)
    assert kept[:ANCHORS] == [1, 2] and kept[-4:] == window


@pytest.mark.parametrize("evict", EVICT_POLICIES)
def test_long_traffic_keeps_anchors_and_window_in_order(tiny_model, evict) -> None:
    policy = RingPolicy(max_slots=48, recent_window=8, evict_batch=6, prefill_chunk=16,
                        evict=evict)
    conv = Conversation(tiny_model, policy)
    conv.ingest([1, 5, 9], anchors=True)
    rng = np.random.default_rng(4)
    for _ in range(12):
        conv.ingest([int(t) for t in rng.integers(3, 250, size=13)])
        for t in rng.integers(3, 250, size=5):
            conv.forward.decode_one_token(int(t))
    clocks = survivors(conv)
    assert conv.ring.evicted > 100
    assert clocks[:3] == [1, 2, 3]
    assert clocks[-8:] == list(range(conv.ring.clock - 7, conv.ring.clock + 1))
    assert (np.diff(clocks) > 0).all()


def test_h2o_accumulates_and_salience_decays(tiny_model) -> None:
    grown = {}
    for evict in ("h2o", "salience"):
        conv = Conversation(tiny_model, RingPolicy(max_slots=64, recent_window=8,
                                                   evict_batch=8, evict=evict))
        conv.ingest([5, 6, 7, 8])
        v = conv.arena.views()
        before = v.slot_salience[:4].copy()
        conv.forward.decode_one_token(9)
        # One decode step hands out exactly 1.0 of mass per layer and head.
        grown[evict] = v.slot_salience[:5].sum() - before.sum()
        if evict == "h2o":
            assert (v.slot_salience[:4] >= before).all()
    assert grown["h2o"] == pytest.approx(1.0, rel=1e-5)
    assert grown["salience"] < grown["h2o"]


def test_tova_scores_are_the_latest_querys_attention(tiny_model) -> None:
    conv = Conversation(tiny_model, RingPolicy(max_slots=64, recent_window=8, evict_batch=8,
                                               evict="tova"))
    conv.ingest([5, 6, 7, 8, 10, 11])
    v = conv.arena.views()
    # A prefill chunk's score is its queries' mean attention: 1.0 in all.
    assert v.slot_salience[:6].sum() == pytest.approx(1.0, rel=1e-5)
    v.slot_salience[:6] = 100.0  # history does not matter to tova
    conv.forward.decode_one_token(9)
    assert v.slot_salience[:7].sum() == pytest.approx(1.0, rel=1e-5)
    assert v.slot_salience[:7].max() <= 1.0


def test_unknown_policy_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown eviction policy 'lru' \\(choose from "
                                         "salience, window, h2o, tova, turns\\)"):
        RingPolicy(evict="lru")
    assert RingPolicy(evict="h2o").scaled_to(128).evict == "h2o"


def test_snapshot_records_the_policy_and_restores_into_another(tiny_model, tmp_path) -> None:
    policy = RingPolicy(max_slots=32, recent_window=4, evict_batch=4, prefill_chunk=8,
                        evict="h2o")
    source = Conversation(tiny_model, policy)
    source.ingest([1, 2], anchors=True)
    source.ingest(list(range(3, 60)))
    path = Snapshotter(source, tmp_path / "x.snapshot.bin").save("").path
    snap = read_snapshot(path)
    try:
        assert snap.identity["ring_policy"]["evict"] == "h2o"
    finally:
        snap.mapping.close()
    same = Conversation(tiny_model, policy)
    restore(same, path)
    n, a, b = source.ring.n_active, source.arena.views(), same.arena.views()
    np.testing.assert_array_equal(a.slot_salience[:n], b.slot_salience[:n])
    assert same.policy.evict == "h2o"
    # Another policy takes the conversation as it is: scores are attention mass in every
    # policy, so they carry over and the new policy's updates take over from there.
    other = Conversation(tiny_model, RingPolicy(max_slots=32, recent_window=4, evict_batch=4,
                                                prefill_chunk=8, evict="window"))
    restore(other, path)
    np.testing.assert_array_equal(other.arena.views().slot_clock[:n], a.slot_clock[:n])
    np.testing.assert_allclose(other.forward.decode_one_token(42),
                               source.forward.decode_one_token(42), rtol=0, atol=1e-5)


@pytest.mark.parametrize("evict", EVICT_POLICIES)
def test_numpy_and_ggml_agree_step_by_step(tmp_path_factory, evict) -> None:
    pytest.importorskip("ggml", reason="ggml-python is not installed (needs a C compiler)")
    from engine.backends.ggml.backend import GgmlBackend

    model = tiny(tmp_path_factory, QT.F32, context_length=40, seed=3)
    policy = RingPolicy(max_slots=24, recent_window=4, evict_batch=3, prefill_chunk=5,
                        evict=evict)
    ids = [int(t) for t in np.random.default_rng(1).integers(3, 250, 90)]
    want, ref = run_steps(model, None, ids, policy)
    got, conv = run_steps(model, GgmlBackend(), ids, policy)
    assert conv.ring.evicted > 20 and conv.ring.evicted == ref.ring.evicted
    a, b = ref.arena.views(), conv.arena.views()
    assert list(b.slot_clock[: conv.ring.n_active]) == list(a.slot_clock[: ref.ring.n_active])
    np.testing.assert_allclose(got, want, atol=max(1e-4, 1e-2 * float(np.abs(want).max())),
                               rtol=0)


@pytest.mark.parametrize("evict", EVICT_POLICIES)
def test_decode_with_evictions_allocates_nothing(tiny_model, evict) -> None:
    policy = RingPolicy(max_slots=64, recent_window=8, evict_batch=8, prefill_chunk=16,
                        evict=evict)
    conv = Conversation(tiny_model, policy)
    conv.ingest([1, 2, 3], anchors=True)
    token = iter(range(10**6))

    def step() -> None:
        conv.forward.decode_one_token(3 + next(token) % 200)

    for _ in range(100):  # a full ring, evicting
        step()
    report = measure_allocations(step, repeat=100)
    assert conv.ring.evicted > 0
    assert report.numpy_new_buffers == 0 and report.numpy_net_bytes <= 0


def test_placement_and_engine_args_carry_the_policy(tiny_model) -> None:
    from engine.__main__ import parse_args
    from engine.backends.numpy.backend import NumpyBackend
    from engine.backends.select import Choice, Placement

    args = parse_args(["--evict", "tova", "--ring-slots", "128"])
    cfg = tiny_model.config
    placement = Placement(Choice(NumpyBackend(), None), ring_slots=args.ring_slots,
                          evict=args.evict)
    assert placement.policy(cfg).evict == "tova" and placement.policy(cfg).max_slots == 128
    sized = Placement(Choice(NumpyBackend(), None), evict="window").policy(cfg)
    assert sized.evict == "window" and sized.max_slots == cfg.context_length
    assert Placement(Choice(NumpyBackend(), None)).policy(cfg) is None
    with pytest.raises(SystemExit):
        parse_args(["--evict", "lru"])


def test_cli_perplexity_reads_through_the_asked_policy(tiny_gguf, tiny_cache, tmp_path,
                                                        capsys) -> None:
    import json

    from channel_cli.cli import main

    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat and then it went to sleep. " * 12)
    code = main(["perplexity", "--model", str(tiny_gguf), "--cache-dir", str(tiny_cache),
                 "--backend", "numpy", "--text", str(text), "--ring-slots", "64",
                 "--evict", "window", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["evict"] == "window" and result["evicted"] > 0


def turns_ring(model, short_tokens: int, long_tokens: int, **kw) -> Conversation:
    """A full 32-slot ring (2 anchors, a window of 4) holding a turn of `short_tokens`, a
    turn of `long_tokens` and a last turn that fills the rest, every candidate scored by age
    (the oldest lowest), so that `salience` would evict the first turn first."""
    policy = RingPolicy(**{"max_slots": 32, "recent_window": 4, "evict_batch": 4,
                           "prefill_chunk": 8, "evict": "turns", "short_turn": 4, **kw})
    conv = Conversation(model, policy)
    conv.ingest([1, 2], anchors=True)
    for tokens in (short_tokens, long_tokens, 30 - short_tokens - long_tokens):
        conv.ring.mark_turn_start()
        conv.ingest([int(t) for t in np.arange(tokens) % 200 + 3])
    v, n = conv.arena.views(), conv.ring.n_active
    assert n == policy.max_slots
    v.slot_salience[:n] = np.arange(n, dtype=np.float32) + 1.0
    return conv


def test_turns_keeps_a_short_turn_whole_and_evicts_the_lowest_others(tiny_model) -> None:
    conv = turns_ring(tiny_model, short_tokens=3, long_tokens=20)
    clocks = survivors(conv)
    short, rest = clocks[2:5], clocks[5:]
    conv.ring.reserve(1)
    assert conv.ring.evicted == 4
    kept = survivors(conv)
    assert set(short) <= set(kept)  # the oldest, lowest-scored slots, yet a short turn
    assert set(rest[:4]).isdisjoint(kept)  # the next-lowest go instead
    assert kept == clocks[:5] + rest[4:]


def test_turns_judges_a_turn_by_its_ingested_length_not_what_is_left(tiny_model) -> None:
    # The first turn had 6 tokens (more than short_turn = 4): it is not protected, even once
    # evictions leave it with fewer.
    conv = turns_ring(tiny_model, short_tokens=6, long_tokens=20)
    first = survivors(conv)[2:8]
    conv.ring.reserve(1)
    assert set(first[:4]).isdisjoint(survivors(conv))
    conv.arena.views().slot_salience[: conv.ring.n_active] = 0.0  # all equal: oldest go
    conv.ring.reserve(conv.ring.max_admit())
    assert set(first).isdisjoint(survivors(conv))


def test_turns_protects_no_more_than_its_share(tiny_model) -> None:
    # A share of 0.1 leaves room for 2 of the 26 - 4 candidates that stay: a short turn of 3
    # does not fit, so the policy is plain salience (lowest first).
    conv = turns_ring(tiny_model, short_tokens=3, long_tokens=20, short_turn_share=0.1)
    clocks = survivors(conv)
    conv.ring.reserve(1)
    assert set(clocks[2:6]).isdisjoint(survivors(conv))
