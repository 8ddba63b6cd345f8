"""Ring maintenance on the Vulkan backend: eviction and rebase run in numpy on the mapped
arena and must leave exactly the state the numpy backend leaves; the device key re-rotation
must equal numpy's rebase rotation. Both for llama's interleaved RoPE pairs and for
split-half models (qwen2's QKV bias; qwen3's QK-norm and wide heads), whose keys keep numpy's
layout too; LFM2's conv carries and Gemma 3's window planes (whose keys a rebase re-rotates on
the host) follow every token, evicted or not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from engine.conversation import Conversation
from engine.model.layer_kinds import CONV, FULL
from engine.model.model import load_model
from engine.session.session import Session
from engine.state.arena import LAYER_PLANES
from engine.state.ring_policy import RingPolicy

from .parity import tiny
from .rollback_checks import assert_undo_and_regenerate_are_exact

FIXTURES = Path(__file__).parent / "fixtures" / "arch"

POLICY = RingPolicy(max_slots=64, recent_window=8, evict_batch=8, prefill_chunk=16)


def feed(conv: Conversation, count: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    vocab = conv.model.config.vocab_size
    for start in range(0, count, 16):
        ids = [int(t) for t in rng.integers(3, vocab, size=min(16, count - start))]
        conv.ingest(ids[:8])
        for t in ids[8:]:
            conv.forward.decode_one_token(t)


@pytest.fixture(scope="module", params=["llama", "qwen2", "qwen3", "lfm2", "qwen35", "gemma3"])
def ring_model(request, tmp_path_factory):
    if request.param == "llama":
        return request.getfixturevalue("tiny_model")
    # LFM2: conv carries beside the ring's one plane; Qwen3.5: delta-rule states beside it,
    # and keys rotated on 8 of their 32 dims (partial rotary: the rebase turns those alone);
    # Gemma 3: five 8-token window planes beside the ring's one plane.
    extra = {"qwen3": {"head_dim": 32},
             "lfm2": {"n_layers": 3, "layer_kinds": (CONV, FULL, CONV)},
             "qwen35": {"n_layers": 4, "head_dim": 32, "rope_dim": 8},
             "gemma3": {"n_layers": 6, "head_dim": 32, "sliding_window": 8}}
    return tiny(tmp_path_factory, QT.F32, architecture=request.param,
                **extra.get(request.param, {}))


def test_eviction_and_rebase_match_numpy(ring_model, vk_backend, staging) -> None:
    tiny_model = ring_model
    convs = [Conversation(tiny_model, POLICY, backend=b) for b in (None, vk_backend)]
    # Staging forced, or an arena the CPU reads slowly of itself (a discrete GPU's BAR).
    uncached = staging or not convs[1].forward.res.arena_cached
    assert (convs[1].ring.device is not None) == uncached
    for conv in convs:
        conv.ingest([1, 10, 20, 30], anchors=True)
        feed(conv, 600, seed=3)  # 9x the ring, 2x the tiny model's 256-position context
    a, b = (c.ring for c in convs)
    assert a.evicted > 0 and a.rebases > 0
    for name in ("n_active", "n_anchors", "clock", "next_pos", "total_ingested", "rebases",
                 "evicted"):
        assert getattr(b, name) == getattr(a, name), name
    va, vb = (c.arena.views() for c in convs)
    n = a.n_active
    assert list(vb.slot_clock[:n]) == list(va.slot_clock[:n])
    assert list(vb.slot_pos[:n]) == list(va.slot_pos[:n])
    np.testing.assert_array_equal(vb.slot_active, va.slot_active)
    np.testing.assert_allclose(vb.slot_salience[:n], va.slot_salience[:n], atol=1e-4, rtol=0)
    np.testing.assert_allclose(vb.k_cache[:, :n], va.k_cache[:, :n], atol=2e-4, rtol=0)
    np.testing.assert_allclose(vb.v_cache[:, :n], va.v_cache[:, :n], atol=2e-4, rtol=0)
    np.testing.assert_allclose(vb.logits, va.logits, atol=2e-4, rtol=0)
    for name in LAYER_PLANES:  # they follow every token, evicted or not
        if name in convs[0].arena.layout:
            np.testing.assert_allclose(getattr(vb, name), getattr(va, name), atol=2e-4, rtol=0)


@pytest.mark.parametrize("fixture,plane", [("lfm2", "conv_state"), ("qwen35", "delta_state"),
                                           ("gemma3", "kw_cache")])
def test_undo_and_regenerate_through_the_device(fixture, plane, vk_backend, staging,
                                                tmp_path) -> None:
    """A mark copies the layer planes, and a rollback restores them, exactly, whether the CPU
    reads them or the device stages them (copy_planes)."""
    model = load_model(FIXTURES / f"{fixture}.gguf", tmp_path / "cache")
    session = Session(model, tmp_path, "s", RingPolicy().scaled_to(128), vk_backend)
    assert_undo_and_regenerate_are_exact(session, "the first message", "and the second one",
                                         plane)


def test_device_key_rotation_equals_numpy_rebase(ring_model, vk_backend) -> None:
    tiny_model = ring_model
    conv = Conversation(tiny_model, POLICY, backend=vk_backend)
    cfg, n = tiny_model.config, 40
    kvh, hd = cfg.n_kv_heads, cfg.head_dim
    rng = np.random.default_rng(11)
    v = conv.arena.views()
    v.k_cache[:, :n] = rng.standard_normal((cfg.n_full, n, cfg.kv_dim)).astype(np.float32)
    angle = rng.uniform(-50, 50, (n, 1)) * tiny_model.rope.inv_freq  # per-slot shifts
    v.rebase_cos[:n, 0] = np.cos(angle)
    v.rebase_sin[:n, 0] = np.sin(angle)
    want = v.k_cache[:, :n].copy()
    a = np.empty((n, kvh, hd // 2), np.float32)
    b = np.empty_like(a)
    for layer in want:  # the model's own rotation: pairs, halves, or partial rotary's
        tiny_model.rope.rotate(layer.reshape(n, kvh, hd), v.rebase_cos[:n], v.rebase_sin[:n],
                               a, b)
    conv.forward.rotate_keys(n)
    np.testing.assert_allclose(v.k_cache[:, :n], want, atol=1e-6, rtol=0)
