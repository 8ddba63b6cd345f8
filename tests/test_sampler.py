"""Sampling: greedy, temperature, top-k, top-p, and a generator whose state lives in the arena."""

from __future__ import annotations

import numpy as np
import pytest

from engine.state.arena import StateArena, conversation_layout
from engine.state.ring_policy import RingPolicy
from engine.state.sampler import Sampler, SamplingSettings

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
