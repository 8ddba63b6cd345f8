"""Values stored by dimension (state/kv_format.py): the arena's by-slot view, eviction's
compaction along the stored axis, window planes (Gemma 3) stored alike, and the layout
checks."""

from __future__ import annotations

import numpy as np
import pytest

from engine.backends.numpy.backend import NumpyBackend
from engine.conversation import Conversation
from engine.errors import LayoutError
from engine.state.arena import StateArena, conversation_layout
from engine.state.kv_format import KVFormat, stored_by_dimension
from engine.state.layout import ArenaLayout
from engine.state.ring_policy import RingPolicy

from .test_ring import feed

POLICY = RingPolicy(max_slots=64, recent_window=8, evict_batch=8, prefill_chunk=16)
BY_DIMENSION = KVFormat(np.float32, np.float32, values_by_dimension=True)


class ByDimensionNumpy(NumpyBackend):
    """The numpy reference over f32 values kept by dimension: only the storage differs."""

    kv_format = BY_DIMENSION


def test_values_are_stored_by_dimension_and_seen_by_slot(tiny_model) -> None:
    cfg = tiny_model.config
    layout = conversation_layout(cfg, POLICY, BY_DIMENSION)
    assert layout["v_cache"].shape == (cfg.n_full, cfg.kv_dim, POLICY.max_slots)
    v = StateArena(layout).views()
    assert v.v_cache.shape == v.k_cache.shape == (cfg.n_full, POLICY.max_slots, cfg.kv_dim)
    assert stored_by_dimension(v.v_cache) and not stored_by_dimension(v.k_cache)
    v.v_cache[1, 5] = np.arange(cfg.kv_dim)  # one slot's values: a column of the stored plane
    stored = v.v_cache.transpose(0, 2, 1)
    assert stored.flags.c_contiguous
    np.testing.assert_array_equal(stored[1, :, 5], np.arange(cfg.kv_dim))


def test_eviction_compacts_values_stored_either_way_alike(tiny_model) -> None:
    """The same traffic through eviction on the numpy reference: the by-dimension planes
    hold the same rows in the same slots (the attention products differ only in rounding)."""
    by_slot = Conversation(tiny_model, POLICY)
    by_dim = Conversation(tiny_model, POLICY, backend=ByDimensionNumpy())
    for conv in (by_slot, by_dim):
        conv.ingest([1, 2], anchors=True)
        feed(conv, 3 * POLICY.max_slots)
    assert by_slot.ring.evicted == by_dim.ring.evicted > 0
    n = by_slot.ring.n_active
    a, b = by_slot.arena.views(), by_dim.arena.views()
    np.testing.assert_array_equal(a.slot_clock[:n], b.slot_clock[:n])
    np.testing.assert_allclose(b.v_cache[:, :n], a.v_cache[:, :n], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b.k_cache[:, :n], a.k_cache[:, :n], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(by_dim.forward.decode_one_token(9),
                               by_slot.forward.decode_one_token(9), rtol=1e-4, atol=1e-4)


def test_window_planes_by_dimension_follow_by_slot(tmp_path) -> None:
    """Gemma 3's window value planes take the ring's format: numpy reading them by dimension
    through rolled windows and evictions gives the by-slot logits, and a snapshot of one
    restores into the other."""
    from engine.model.model import load_model
    from engine.snapshot.chain import restore
    from engine.snapshot.snapshotter import Snapshotter

    from .test_gemma3 import write_gemma

    model = load_model(write_gemma(tmp_path), tmp_path / "cache")
    convs = [Conversation(model, POLICY), Conversation(model, POLICY, backend=ByDimensionNumpy())]
    assert not stored_by_dimension(convs[0].arena.views().vw_cache)
    assert stored_by_dimension(convs[1].arena.views().vw_cache)
    ids = [int(t) for t in np.random.default_rng(3).integers(4, 5000, 100)]
    runs = []
    for conv in convs:
        conv.ingest(ids[:30])
        runs.append(np.stack([conv.forward.decode_one_token(t).copy() for t in ids[30:]]))
    assert convs[0].ring.evicted == convs[1].ring.evicted > 0
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-4, atol=1e-4)
    path = Snapshotter(convs[1], tmp_path / "w.snapshot.bin").save("").path
    target = Conversation(model, POLICY)
    restore(target, path)
    np.testing.assert_array_equal(target.arena.views().vw_cache, convs[1].arena.views().vw_cache)
    np.testing.assert_allclose(target.forward.decode_one_token(7),
                               convs[1].forward.decode_one_token(7), rtol=1e-4, atol=1e-4)


def test_kv_formats_refuse_other_element_types() -> None:
    with pytest.raises(ValueError, match="value_dtype must be float32 or float16"):
        KVFormat(np.float32, np.int8)


def test_view_axes_must_permute_the_shape() -> None:
    with pytest.raises(LayoutError, match="do not permute"):
        ArenaLayout().add("v_cache", np.float32, (2, 3, 4), view_axes=(0, 1))
