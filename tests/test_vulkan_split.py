"""Split-K decode attention (shaders/attention_split.comp) against the numpy backend.

Decode cuts each K/V head's live slots into splits whose partials are folded on the device;
salience needs exact softmax probabilities, rebuilt from per-split factors in mass.comp. These
tests force small splits so the tiny models cross every case: one slot, one split, lengths
that are not a multiple of the split, the split cap, splits longer than a subgroup, more splits
than a subgroup has lanes, and a ring that evicts and rebases.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from engine.backends.vulkan.tuning import CPU, GPU, for_heads, split_runs
from engine.conversation import Conversation
from engine.state.ring_policy import RingPolicy
from engine.state.sampler import SamplingSettings

from .parity import TOKENS, tiny

FIXTURES = Path(__file__).parent / "fixtures" / "reference"
ATOL = 5e-5  # logits, as tests/test_vulkan_parity.py
MASS_ATOL = 1e-5
POLICY = RingPolicy(max_slots=64, recent_window=8, evict_batch=8, prefill_chunk=16)
TUNINGS = {
    "cpu": CPU,  # every length here is one split: the unsplit path
    "split": replace(CPU, split_slots=5, max_splits=4),  # capped at 4: splits of up to 16
    "gpu-shaped": replace(GPU, split_slots=3, max_splits=16),  # up to 16 splits, mass_split 4
    # Two subgroups a run, each over parts longer than lavapipe's 8-lane subgroups, or empty.
    "subgroups": replace(GPU, split_slots=20, max_splits=2, split_subgroups=2, fit_heads=False),
    # One-tile parts of up to 2 slots a lane group: several lanes share each slot's score.
    "lanes-per-slot": replace(GPU, split_slots=3, max_splits=8, value_loads=2),
}
# (name, TinySpec fields): G = 2 query heads per K/V head of 16 dims, and SmolLM2's G = 3 of 64.
SHAPES = {"hd16": {}, "hd64-g3": {"d_model": 192, "n_heads": 3, "n_kv_heads": 1}}


def tokens(count: int, vocab: int, seed: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(3, vocab, size=count)]


def decode_both(ref: Conversation, conv: Conversation, token: int) -> None:
    """One decode step on both backends; logits and this pass's mass must agree."""
    want = ref.forward.decode_one_token(token)
    got = conv.forward.decode_one_token(token)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
    n = ref.ring.n_active
    np.testing.assert_allclose(conv.arena.views().mass[:n], ref.arena.views().mass[:n],
                               atol=MASS_ATOL, rtol=0)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("tuning", TUNINGS)
def test_decode_matches_numpy_at_every_live_length(tmp_path_factory, backend_with, tuning,
                                                   shape) -> None:
    """From one live slot to 48, decoding token by token from an empty ring."""
    model = tiny(tmp_path_factory, QT.F32, seed=3, **SHAPES[shape])
    t = TUNINGS[tuning]
    ref = Conversation(model, POLICY)
    conv = Conversation(model, POLICY, backend=backend_with(t))
    runs = []  # (live slots, slots per split, splits) of every step
    for token in tokens(48, model.config.vocab_size, seed=1):
        decode_both(ref, conv, token)
        runs.append((conv.ring.n_active, *split_runs(t, conv.ring.n_active)))
    np.testing.assert_allclose(conv.arena.views().slot_salience[:48],
                               ref.arena.views().slot_salience[:48], atol=MASS_ATOL, rtol=0)
    assert runs[0] == (1, 1, 1)
    if tuning == "cpu":
        assert {count for *_, count in runs} == {1}
    else:  # uneven last splits, the cap, splits longer than a subgroup or more than its lanes
        assert any(count > 1 and n % length for n, length, count in runs)
        assert max(count for *_, count in runs) == t.max_splits


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("tuning", ["split", "gpu-shaped", "lanes-per-slot"])
def test_split_outputs_and_probabilities_are_exact(tmp_path_factory, backend_with, tuning,
                                                   shape) -> None:
    """The folded attention output of the last layer is softmax(q K / sqrt(d)) V of the
    arena's own keys and values, and every layer's rebuilt probabilities are a softmax."""
    model = tiny(tmp_path_factory, QT.F32, seed=4, **SHAPES[shape])
    cfg, t = model.config, TUNINGS[tuning]
    conv = Conversation(model, POLICY, backend=backend_with(t))
    conv.ingest(TOKENS[:16])
    conv.forward.decode_one_token(TOKENS[16])
    n = conv.ring.n_active
    length, count = split_runs(t, n)
    assert count > 1 and n % length != 0
    res = conv.forward.res
    if not all(b.host_visible for b in (res.act, res.probs, res.splits)):
        pytest.skip("scratch is not host-visible on this device")
    act = res.act.array.view(np.float32)
    lay, hd, g = res.act_layout, cfg.head_dim, cfg.n_heads // cfg.n_kv_heads
    q = act[lay.q : lay.q + cfg.q_dim].reshape(cfg.n_heads, hd)
    out = act[lay.attn : lay.attn + cfg.q_dim].reshape(cfg.n_heads, hd)
    v = conv.arena.views()
    keys = v.k_cache[-1, :n].reshape(n, cfg.n_kv_heads, hd)
    values = v.v_cache[-1, :n].reshape(n, cfg.n_kv_heads, hd)
    slots = POLICY.max_slots
    rows = cfg.n_layers * cfg.n_heads
    probs = res.probs.array.view(np.float32)[: rows * slots].reshape(rows, slots)[:, :n]
    factors = res.splits.array.view(np.float32)[: rows * t.max_splits].reshape(rows, -1)
    p = probs * factors[:, np.arange(n) // length]  # [rows, n] softmax probabilities
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-5, rtol=0)
    for h in range(cfg.n_heads):
        scores = keys[:, h // g] @ q[h] / np.sqrt(hd)
        want = np.exp(scores - scores.max())
        want /= want.sum()
        np.testing.assert_allclose(p[rows - cfg.n_heads + h], want, atol=1e-6, rtol=0)
        np.testing.assert_allclose(out[h], want @ values[:, h // g], atol=1e-5, rtol=0)


@pytest.mark.parametrize("tuning", ["split", "gpu-shaped"])
def test_split_decode_through_eviction_and_rebase(tiny_model, backend_with, tuning) -> None:
    """Past the ring (evictions) and past the model's 256 positions (rebases), every decode
    step still matches numpy."""
    convs = [Conversation(tiny_model, POLICY, backend=b)
             for b in (None, backend_with(TUNINGS[tuning]))]
    for conv in convs:
        conv.ingest([1, 10, 20, 30], anchors=True)
    ids = tokens(320, tiny_model.config.vocab_size, seed=7)
    for start in range(0, len(ids), 16):
        for conv in convs:
            conv.ingest(ids[start : start + 4])
        for token in ids[start + 4 : start + 16]:
            decode_both(*convs, token)
    a, b = (c.ring for c in convs)
    assert a.evicted > 0 and a.rebases > 0
    assert (b.evicted, b.rebases) == (a.evicted, a.rebases)


def test_greedy_generation_on_split_decode_matches_numpy(tiny_model, backend_with) -> None:
    """The tail dispatch's argmax (mass.comp's extra workgroup) drives greedy generation."""
    out = []
    for backend in (None, backend_with(TUNINGS["gpu-shaped"])):
        conv = Conversation(tiny_model, POLICY, backend=backend)
        conv.ingest(TOKENS[:9])
        out.append(conv.generate(SamplingSettings(), 30, frozenset()).ids)
    assert out[0] == out[1]


@pytest.mark.parametrize("tuning", TUNINGS)
def test_decode_dispatches_per_token(tiny_model, backend_with, tuning) -> None:
    """Five per layer (the split fold runs inside attention), embed, logits, and one tail
    for mass and argmax: SmolLM2's 30 layers take 153, down from 154 (mass and argmax were
    two dispatches) and not 184 (a separate split-reduction pass per layer)."""
    conv = Conversation(tiny_model, POLICY, backend=backend_with(TUNINGS[tuning]))
    assert conv.forward.dispatches_per_token == 5 * tiny_model.config.n_layers + 3


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.parametrize("tuning", ["split", "gpu-shaped"])
def test_shipped_model_greedy_reply_through_splits(real_model, backend_with, tuning) -> None:
    """SmolLM2 (3 K/V heads of 64 dims, G = 3) decoding through 8-slot splits gives the HF
    reference's greedy continuation token for token (tests/test_vulkan_real.py's check)."""
    chat = json.loads((FIXTURES / "index.json").read_text())["greedy"]["chats"][0]
    t = replace(TUNINGS[tuning], split_slots=8)
    conv = Conversation(real_model, RingPolicy(max_slots=512), backend=backend_with(t))
    logits = conv.ingest(chat["prompt_ids"])
    generated = []
    for _ in range(16):
        generated.append(int(np.argmax(logits)))
        logits = conv.forward.decode_one_token(generated[-1])
    assert split_runs(t, conv.ring.n_active)[1] >= 4
    assert generated == chat["generated_ids"][:16]


def test_wide_heads_get_runs_of_one_tile_a_subgroup() -> None:
    """On an H200 (32-lane subgroups) a 256-wide head's decode runs are cut from 64 slots to
    32, four subgroups of one 8-slot tile each, and a 4096-slot ring may need 128 of them;
    the shipped model's 64-wide heads keep the measured 64-slot runs."""
    wide = for_heads(GPU, 256, 32, 4096)
    assert (wide.split_slots, wide.max_splits) == (32, 128)
    length, count = split_runs(wide, 4000)
    assert count <= wide.max_splits and -(-length // GPU.split_subgroups) <= 8
    assert for_heads(GPU, 64, 32, 4096) == GPU
    assert for_heads(replace(GPU, fit_heads=False), 256, 32, 4096).split_slots == 64
    assert for_heads(CPU, 256, 32, 4096) == CPU  # the CPU form has no tiles
