"""Each stage of the sampler chain against llama.cpp's own sampler, through llama-cpp-python's
low-level API (skipped without it): the same logits, and the same tokens accepted before, give
the same candidate set, logits and probabilities.

On llama.cpp's side every chain ends with its `dist` sampler, which normalizes the
probabilities over the candidates left (the distribution it draws from); ours is
Sampler.distribution. The draw itself uses another generator and is not compared.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from engine.state.arena import StateArena, conversation_layout
from engine.state.dry import apply_dry, breaker_table
from engine.state.penalties import RecentTokens, apply_penalties
from engine.state.ring_policy import RingPolicy
from engine.state.sampler import Sampler, SamplingSettings
from engine.state.sampling_defaults import defaults_for

from .test_layout import TINY

llama_cpp = pytest.importorskip("llama_cpp")
L = llama_cpp.llama_cpp

RNG = np.random.default_rng(29)
SPREAD = (RNG.standard_normal(TINY.vocab_size) * 3).astype(np.float32)  # a wide distribution
PEAKED = SPREAD.copy()
PEAKED[[5, 9, 17, 40]] = [9.0, 8.5, 8.0, 7.2]  # a few favourites
SHARP = SPREAD.copy()
SHARP[[5, 9, 17, 40]] = [12.0, 11.8, 11.5, 10.0]  # p about 0.35, 0.29, 0.21, 0.05 (XTC)
HISTORY = [5, 9, 17, 5, 9, 200, 5, 3, 3, 3, 120, 9]  # tokens the reply took so far


@pytest.fixture(scope="module")
def views():
    return StateArena(conversation_layout(TINY, RingPolicy().scaled_to(64))).views()


def ours(views, settings: SamplingSettings, logits: np.ndarray, history=(),
         tokenizer=None) -> dict[int, float]:
    sampler = Sampler(0, tokenizer)
    sampler.begin_reply(views, settings)
    for token in history:
        sampler.accept(token)
    ids, probs = sampler.distribution(views, settings, logits)
    ids = np.arange(probs.shape[0]) if ids is None else ids
    return {int(i): float(p) for i, p in zip(ids, probs, strict=True)}


def our_edits(settings: SamplingSettings, logits: np.ndarray, history=(),
              breakers=None) -> np.ndarray:
    """The logits after our penalty and DRY stages, the stages that edit them in place."""
    recent = RecentTokens()
    recent.reset(settings.repeat_last_n)
    for token in history:
        recent.accept(token)
    edited = logits.copy()
    apply_penalties(edited, recent, settings)
    apply_dry(edited, recent.tokens, settings, breakers or {})
    return edited


def theirs(stages: list, logits: np.ndarray, history=()) -> tuple[dict[int, float], np.ndarray]:
    """llama.cpp's chain of `stages` plus dist: {token: p} of what is left, and the logits of
    the whole array as the stages left them (in token order where the array still has them)."""
    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    for stage in [*stages, L.llama_sampler_init_dist(1234)]:
        L.llama_sampler_chain_add(chain, stage)
    for token in history:
        L.llama_sampler_accept(chain, token)
    n = logits.shape[0]
    data = (L.llama_token_data * n)(*[L.llama_token_data(i, float(x), 0.0)
                                      for i, x in enumerate(logits)])
    array = L.llama_token_data_array(data, n, -1, False)
    L.llama_sampler_apply(chain, ctypes.byref(array))
    left = {array.data[i].id: array.data[i].p for i in range(array.size)}
    edited = np.empty(n, np.float32)
    for item in data:
        edited[item.id] = item.logit
    L.llama_sampler_free(chain)
    return left, edited


def assert_same(mine: dict[int, float], llama: dict[int, float]) -> None:
    assert set(mine) == set(llama)
    keys = sorted(llama)
    np.testing.assert_allclose([mine[k] for k in keys], [llama[k] for k in keys],
                               rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("k", [1, 5, 40, 266, 267, 0])
def test_top_k(views, k) -> None:
    assert_same(ours(views, SamplingSettings(temperature=1.0, top_k=k), SPREAD),
                theirs([L.llama_sampler_init_top_k(k)], SPREAD)[0])


@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.9, 0.95, 0.999])
@pytest.mark.parametrize("logits", [SPREAD, PEAKED], ids=["spread", "peaked"])
def test_top_p(views, p, logits) -> None:
    assert_same(ours(views, SamplingSettings(temperature=1.0, top_p=p), logits),
                theirs([L.llama_sampler_init_top_p(p, 0)], logits)[0])


@pytest.mark.parametrize("p", [0.001, 0.05, 0.2, 0.5, 1.0])
@pytest.mark.parametrize("logits", [SPREAD, PEAKED], ids=["spread", "peaked"])
def test_min_p(views, p, logits) -> None:
    assert_same(ours(views, SamplingSettings(temperature=1.0, min_p=p), logits),
                theirs([L.llama_sampler_init_min_p(p, 0)], logits)[0])


@pytest.mark.parametrize("p", [0.05, 0.2, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("logits", [SPREAD, PEAKED], ids=["spread", "peaked"])
def test_typical_p(views, p, logits) -> None:
    assert_same(ours(views, SamplingSettings(temperature=1.0, typical_p=p), logits),
                theirs([L.llama_sampler_init_typical(p, 0)], logits)[0])


@pytest.mark.parametrize(("threshold", "dropped"),
                         [(0.01, 4), (0.1, 2), (0.25, 1), (0.35, 0), (0.6, 0)])
def test_xtc_when_it_fires(views, threshold, dropped) -> None:
    # Probability 1: XTC always fires, so the generators' different draws do not matter.
    settings = SamplingSettings(temperature=1.0, xtc_probability=1.0, xtc_threshold=threshold)
    llama = theirs([L.llama_sampler_init_xtc(1.0, threshold, 0, 7)], SHARP)[0]
    assert_same(ours(views, settings, SHARP), llama)
    assert len(llama) == TINY.vocab_size - dropped  # all but the least likely of those above


@pytest.mark.parametrize("t", [0.1, 0.5, 0.8, 1.0, 1.7])
def test_temperature(views, t) -> None:
    assert_same(ours(views, SamplingSettings(temperature=t), SPREAD),
                theirs([L.llama_sampler_init_temp(t)], SPREAD)[0])


@pytest.mark.parametrize(("last_n", "repeat", "freq", "present"), [
    (64, 1.1, 0.0, 0.0), (64, 1.5, 0.0, 0.0), (4, 1.3, 0.0, 0.0), (64, 1.0, 0.3, 0.0),
    (64, 1.0, 0.0, 0.6), (6, 1.2, 0.25, 0.5), (64, 0.8, -0.1, -0.2),
])
def test_penalties(views, last_n, repeat, freq, present) -> None:
    settings = SamplingSettings(temperature=1.0, repeat_penalty=repeat, repeat_last_n=last_n,
                                frequency_penalty=freq, presence_penalty=present)
    probs, edited = theirs(
        [L.llama_sampler_init_penalties(TINY.vocab_size, last_n, repeat, freq, present)],
        SPREAD, HISTORY)
    assert_same(ours(views, settings, SPREAD, HISTORY), probs)
    np.testing.assert_allclose(our_edits(settings, SPREAD, HISTORY), edited, rtol=1e-6,
                               atol=1e-6)
    assert not np.array_equal(edited, SPREAD)  # the case penalized something


def test_penalties_over_the_whole_reply_are_llama_cpps_over_all_of_it(views) -> None:
    settings = SamplingSettings(temperature=1.0, repeat_penalty=1.3, repeat_last_n=-1)
    stage = L.llama_sampler_init_penalties(TINY.vocab_size, len(HISTORY), 1.3, 0.0, 0.0)
    assert_same(ours(views, settings, SPREAD, HISTORY), theirs([stage], SPREAD, HISTORY)[0])


DRY_HISTORIES = [
    [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3],  # a cycle: 4 would continue it
    [7, 8, 9, 10, 11, 50, 7, 8, 9, 10],  # one repeat of a run: 11 would extend it
    [3, 3, 3, 3, 3, 3],
    [20, 21, 22, 23, 24, 25, 26, 27, 20, 21, 22, 23, 24, 25, 26],  # long: exponent grows
    [1, 2, 5, 6],  # no repeat
]


@pytest.mark.parametrize("history", DRY_HISTORIES)
@pytest.mark.parametrize(("multiplier", "base", "allowed", "last_n"),
                         [(0.8, 1.75, 2, 1000), (1.0, 2.0, 1, 1000), (0.5, 1.1, 3, 6)])
def test_dry_without_breakers(views, history, multiplier, base, allowed, last_n) -> None:
    settings = SamplingSettings(temperature=1.0, dry_multiplier=multiplier, dry_base=base,
                                dry_allowed_length=allowed, dry_penalty_last_n=last_n)
    stage = L.llama_sampler_init_dry(None, multiplier, base, allowed, last_n, None, 0)
    probs, edited = theirs([stage], SPREAD, history)
    assert_same(ours(views, settings, SPREAD, history), probs)
    np.testing.assert_allclose(our_edits(settings, SPREAD, history), edited, rtol=1e-6,
                               atol=1e-5)


def test_the_default_chain(views) -> None:
    """llama.cpp's default order with Channel's default values, on tokens already taken."""
    settings = defaults_for()

    def stages() -> list:  # a chain frees its stages: each run makes its own
        return [L.llama_sampler_init_penalties(TINY.vocab_size, 64, 1.1, 0.0, 0.0),
                L.llama_sampler_init_top_k(40), L.llama_sampler_init_typical(1.0, 0),
                L.llama_sampler_init_top_p(0.95, 0), L.llama_sampler_init_min_p(0.05, 0),
                L.llama_sampler_init_temp(0.8)]

    for logits in (SPREAD, PEAKED):
        assert_same(ours(views, settings, logits, HISTORY),
                    theirs(stages(), logits, HISTORY)[0])


def test_every_stage_at_once(views) -> None:
    settings = SamplingSettings(
        temperature=0.7, top_k=60, top_p=0.97, min_p=0.02, typical_p=0.95,
        repeat_penalty=1.2, repeat_last_n=8, presence_penalty=0.1, frequency_penalty=0.05,
        dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=1, dry_penalty_last_n=1000,
        xtc_probability=1.0, xtc_threshold=0.05)
    stages = [L.llama_sampler_init_penalties(TINY.vocab_size, 8, 1.2, 0.05, 0.1),
              L.llama_sampler_init_dry(None, 0.8, 1.75, 1, 1000, None, 0),
              L.llama_sampler_init_top_k(60), L.llama_sampler_init_typical(0.95, 0),
              L.llama_sampler_init_top_p(0.97, 0), L.llama_sampler_init_min_p(0.02, 0),
              L.llama_sampler_init_xtc(1.0, 0.05, 0, 7), L.llama_sampler_init_temp(0.7)]
    history = DRY_HISTORIES[0] + HISTORY
    assert_same(ours(views, settings, PEAKED, history), theirs(stages, PEAKED, history)[0])


DRY_TEXTS = [  # (text, how many tokens DRY penalizes after it)
    ("the cat sat on the mat and the cat sat on the", 1),  # no breaker: " mat"
    ("name: the cat sat on it\nname: the cat sat on", 1),  # ":" and "\n" limit the repeat
    ('he said "the cat sat on" and "the cat sat', 1),
    ("**the cat sat on the** mat, **the cat sat on the", 0),  # only "**" continues: a breaker
    ("we saw the end of it, then the end of the day, then the", 1),  # a multi-token breaker
]
BREAKERS = ("\n", ":", "\"", "*", "the end")


@pytest.fixture(scope="module")
def llama_vocab(real_model_path):
    params = L.llama_model_default_params()
    params.vocab_only = True
    model = L.llama_model_load_from_file(str(real_model_path).encode(), params)
    if not model:
        pytest.fail(f"llama.cpp could not load the vocabulary of {real_model_path}")
    yield L.llama_model_get_vocab(model)
    L.llama_model_free(model)


@pytest.mark.real_model
@pytest.mark.parametrize(("text", "penalized"), DRY_TEXTS)
def test_dry_with_sequence_breakers_on_the_real_vocabulary(real_model, llama_vocab, text,
                                                           penalized) -> None:
    """Breakers are strings matched against each token's text, and a token that ends with a
    breaker's start counts with the tokens that spell the rest: llama.cpp builds that table
    from its vocabulary, ours from the tokenizer (dry.breaker_table)."""
    vocab = real_model.config.vocab_size
    logits = (np.random.default_rng(3).standard_normal(vocab) * 3).astype(np.float32)
    history = real_model.tokenizer.encode(text, parse_special=False)
    settings = SamplingSettings(temperature=1.0, dry_multiplier=0.8, dry_base=1.75,
                                dry_allowed_length=2, dry_penalty_last_n=4096,
                                dry_sequence_breakers=BREAKERS)
    strings = (ctypes.c_char_p * len(BREAKERS))(*[b.encode() for b in BREAKERS])
    stage = L.llama_sampler_init_dry(llama_vocab, 0.8, 1.75, 2, 4096, strings, len(BREAKERS))
    probs, edited = theirs([stage], logits, history)
    views = StateArena(conversation_layout(real_model.config, RingPolicy().scaled_to(64))).views()
    assert_same(ours(views, settings, logits, history, real_model.tokenizer), probs)
    table = breaker_table(real_model.tokenizer, BREAKERS)
    mine = our_edits(settings, logits, history, table)
    np.testing.assert_allclose(mine, edited, rtol=1e-6, atol=1e-5)
    assert int(np.count_nonzero(edited != logits)) == penalized
