"""Sampling: greedy, temperature, top-k, top-p, a generator whose state lives in the arena,
per-reply seeds, the settings' ranges, and a chain that allocates nothing per token (each
stage against llama.cpp: test_sampler_parity.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from engine.allocs import measure_allocations
from engine.state.arena import StateArena, conversation_layout
from engine.state.ring_policy import RingPolicy
from engine.state.sampler import Sampler, SamplingSettings
from engine.state.sampling import another_seed
from engine.state.sampling_defaults import defaults_for

from .test_layout import TINY


@pytest.fixture
def views():
    arena = StateArena(conversation_layout(TINY, RingPolicy().scaled_to(64)))
    v = arena.views()
    rng = np.random.default_rng(1)
    v.logits[:] = rng.standard_normal(v.logits.shape).astype(np.float32) * 3
    return v


def test_greedy_is_argmax(views) -> None:
    assert Sampler().sample(views, SamplingSettings()) == int(np.argmax(views.logits))


def test_top_k_one_and_tiny_top_p_are_greedy(views) -> None:
    best = int(np.argmax(views.logits))
    sampler = Sampler(3)
    for _ in range(20):
        assert sampler.sample(views, SamplingSettings(temperature=1.5, top_k=1)) == best
        assert sampler.sample(views, SamplingSettings(temperature=1.5, top_p=1e-6)) == best


def test_top_k_only_draws_from_the_k_best(views) -> None:
    allowed = set(np.argsort(views.logits)[-5:].tolist())
    sampler = Sampler(4)
    draws = {sampler.sample(views, SamplingSettings(temperature=2.0, top_k=5)) for _ in range(300)}
    assert draws <= allowed and len(draws) > 1


def test_top_p_keeps_the_smallest_nucleus(views) -> None:
    logits = views.logits
    logits[:] = -30.0
    logits[[7, 8, 9]] = [2.0, 1.0, 0.0]  # p ~ 0.665, 0.245, 0.090
    sampler = Sampler(5)
    nucleus = SamplingSettings(temperature=1.0, top_p=0.8)
    draws = [sampler.sample(views, nucleus) for _ in range(400)]
    assert set(draws) == {7, 8}
    share = draws.count(7) / len(draws)
    assert 0.62 < share < 0.84  # renormalised: 0.665 / 0.91 = 0.73


def test_temperature_sampling_follows_the_softmax(views) -> None:
    logits = views.logits
    logits[:] = -40.0
    logits[[1, 2, 3]] = [0.0, np.log(2.0), np.log(5.0)]
    sampler = Sampler(6)
    warm = SamplingSettings(temperature=1.0)
    draws = np.array([sampler.sample(views, warm) for _ in range(4000)])
    freq = np.array([(draws == i).mean() for i in (1, 2, 3)])
    np.testing.assert_allclose(freq, [1 / 8, 2 / 8, 5 / 8], atol=0.03)


def test_generator_state_round_trips_through_the_arena(views) -> None:
    s = SamplingSettings(temperature=1.0)
    a = Sampler()
    a.seed(views, 1234)
    a.sample(views, s)
    saved = views.sampler_state.copy()
    expected = [a.sample(views, s) for _ in range(10)]
    views.sampler_state[:] = saved
    b = Sampler(99)
    b.load_state(views)
    assert [b.sample(views, s) for _ in range(10)] == expected


@pytest.mark.parametrize(
    "kwargs", [{"temperature": -1}, {"temperature": float("nan")}, {"top_k": -2}, {"top_p": 0.0},
               {"top_p": 1.5}],
)
def test_bad_settings_are_refused(kwargs) -> None:
    with pytest.raises(ValueError):
        SamplingSettings(**kwargs)


@pytest.mark.parametrize("settings", [
    defaults_for(),  # penalties, top-k 40, top-p, min-p, temperature
    SamplingSettings(temperature=0.8, top_p=0.95),  # no top-k: the whole vocabulary sorted
    SamplingSettings(temperature=0.8, top_k=100, typical_p=0.9),
    SamplingSettings(temperature=0.8, xtc_probability=1.0, xtc_threshold=0.01),
    SamplingSettings(temperature=0.8),  # temperature alone: no sort
    defaults_for().with_overrides({"dry_multiplier": 0.8, "presence_penalty": 0.2}),
], ids=["defaults", "sorted-vocabulary", "typical", "xtc", "temperature", "dry"])
def test_the_chain_allocates_nothing_per_token(real_model, settings) -> None:
    """Every stage works in arena scratch: no numpy buffer per token, and no temporary the
    size of the vocabulary (49152 floats would be 196 kB)."""
    views = StateArena(conversation_layout(real_model.config, RingPolicy().scaled_to(64))).views()
    logits = (np.random.default_rng(0).standard_normal(real_model.config.vocab_size) * 3
              ).astype(np.float32)
    sampler = Sampler(0, real_model.tokenizer)
    sampler.begin_reply(views, settings)
    for t in range(100):
        sampler.accept(t * 7 % 30)
    for _ in range(3):  # warm-up: the DRY breaker table, numpy's first-call caches
        sampler.sample(views, settings, logits)
    report = measure_allocations(lambda: sampler.sample(views, settings, logits), repeat=20)
    assert report.numpy_new_buffers == 0 and report.numpy_net_bytes <= 0
    assert report.peak_transient_bytes < 16_384


def test_a_reply_is_seeded_and_its_seed_reproduces_it(views) -> None:
    settings = SamplingSettings(temperature=1.0, top_k=50)
    sampler = Sampler(7)
    seed = sampler.begin_reply(views, settings)
    assert seed is not None
    first = [sampler.sample(views, settings) for _ in range(30)]
    again = Sampler(99)
    assert again.begin_reply(views, replace(settings, seed=seed)) == seed
    assert [again.sample(views, settings) for _ in range(30)] == first
    # The next reply's seed comes from the generator as the first reply left it.
    assert sampler.begin_reply(views, settings) not in (None, seed)


def test_a_greedy_reply_draws_nothing(views) -> None:
    sampler = Sampler(3)
    sampler.save_state(views)
    before = views.sampler_state.copy()
    assert sampler.begin_reply(views, SamplingSettings()) is None
    sampler.sample(views, SamplingSettings())
    np.testing.assert_array_equal(views.sampler_state, before)


def test_a_regenerate_seed_is_another_seed() -> None:
    seeds = {another_seed(s) for s in (0, 1, 2, 2**64 - 1)}
    assert len(seeds) == 4 and all(0 <= s < 2**64 for s in seeds)
    assert another_seed(5) == another_seed(5) != 5


def test_neutral_settings_record_only_what_they_always_did() -> None:
    assert SamplingSettings().record() == {"temperature": 0.0, "top_k": 0, "top_p": 1.0}
    kept = defaults_for().with_overrides({"seed": 3, "dry_multiplier": 0.5}).record()
    assert kept == {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05,
                    "repeat_penalty": 1.1, "dry_multiplier": 0.5}  # not the seed: see record
    assert SamplingSettings.from_record({**kept, "seed": 3, "stop": "eot"}) == \
        defaults_for().with_overrides({"seed": 3, "dry_multiplier": 0.5})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"min_p": 1.5}, "min_p must be from 0 to 1"), ({"typical_p": 0.0}, "typical_p"),
     ({"repeat_penalty": 0.0}, "repeat_penalty"), ({"repeat_last_n": -2}, "repeat_last_n"),
     ({"presence_penalty": float("inf")}, "presence_penalty"), ({"dry_base": 0.5}, "dry_base"),
     ({"dry_allowed_length": -1}, "dry_allowed_length"), ({"xtc_threshold": 2.0}, "xtc"),
     ({"dry_penalty_last_n": -5}, "dry_penalty_last_n"), ({"seed": 2**64}, "seed")],
)
def test_bad_new_settings_are_refused_in_one_line(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message) as info:
        SamplingSettings(**kwargs)
    assert "\n" not in str(info.value)
