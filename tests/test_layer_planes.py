"""The state of layers outside the ring (issue 27): window planes and conv carries live in
the one arena, follow the token stream, survive a snapshot, a rollback and a rebase exactly,
and a snapshot of one per-layer layout is refused by another with a reason.

The forward passes that fill these planes are proven per architecture against HF transformers
(tests/test_arch_reference.py); here the planes are filled with known values directly.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest

from engine.conversation import Conversation
from engine.model.architecture import CONV, FULL, WINDOW
from engine.model.rope import Rope, window_rope_config
from engine.snapshot.chain import restore
from engine.snapshot.format import SnapshotIdentityError
from engine.snapshot.snapshotter import Snapshotter
from engine.state.arena import conversation_layout
from engine.state.rebase import rebase
from engine.state.ring_policy import RingPolicy

POLICY = RingPolicy(max_slots=64, recent_window=8, evict_batch=8, prefill_chunk=16)
WINDOW_ROWS = 6


def hybrid(model, kinds=(WINDOW, FULL, CONV, WINDOW), theta_window=5000.0):
    """The tiny model with another per-layer layout (its forward pass is never run)."""
    cfg = replace(model.config, n_layers=len(kinds), layer_kinds=kinds, window=WINDOW_ROWS,
                  conv_kernel=3, rope_theta_window=theta_window)
    twin = copy.copy(model)
    twin.config = cfg
    twin.rope_window = Rope(window_rope_config(cfg))
    return twin


def filled(model, clock: int, seed: int = 0) -> Conversation:
    """A conversation whose ring holds `clock` tokens and whose planes hold random values."""
    conv = Conversation(model, POLICY)
    v = conv.arena.views()
    rng = np.random.default_rng(seed)
    n = min(clock, POLICY.max_slots)
    for name in ("k_cache", "v_cache", "kw_cache", "vw_cache", "conv_state"):
        if name in conv.arena.layout:
            plane = getattr(v, name)
            plane[...] = rng.standard_normal(plane.shape).astype(plane.dtype)
    v.slot_active[:n] = 1
    v.slot_pos[:n] = np.arange(n)
    v.slot_clock[:n] = np.arange(1, n + 1)
    v.ring_counters[:4] = (n, 0, clock, n)  # n_active, anchors, clock, next position
    v.ring_counters[4] = clock  # total ingested
    return conv


def test_the_arena_holds_a_plane_per_layer_of_each_kind(tiny_model) -> None:
    cfg = hybrid(tiny_model).config
    lay = conversation_layout(cfg, POLICY)
    kv = cfg.kv_dim
    assert lay["k_cache"].shape == (1, 64, kv)  # the ring: the one FULL layer
    assert lay["kw_cache"].shape == lay["vw_cache"].shape == (2, WINDOW_ROWS, kv)
    assert lay["conv_state"].shape == (1, 2, cfg.d_model)
    assert (cfg.plane(0), cfg.plane(1), cfg.plane(2), cfg.plane(3)) == (0, 0, 0, 1)
    uniform = conversation_layout(tiny_model.config, POLICY)
    assert "kw_cache" not in uniform and "conv_state" not in uniform


@pytest.mark.parametrize("clock", [4, 13, 64])
def test_a_snapshot_keeps_every_plane_exactly(tiny_model, tmp_path, clock) -> None:
    model = hybrid(tiny_model)
    source = filled(model, clock)
    path = Snapshotter(source, tmp_path / "h.snapshot.bin").save("").path
    target = Conversation(model, POLICY)
    report = restore(target, path)
    assert report.clock == clock
    got, want = target.arena.views(), source.arena.views()
    for name in ("kw_cache", "vw_cache", "conv_state"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    np.testing.assert_array_equal(got.k_cache[:, : report.n_active],
                                  want.k_cache[:, : report.n_active])


def test_window_planes_are_saved_oldest_first(tiny_model, tmp_path) -> None:
    """The file holds the window in token order, whatever row the circle has reached."""
    model = hybrid(tiny_model)
    source = filled(model, clock=9)  # rows hold tokens 7, 8, 9, 4, 5, 6
    source.arena.views().kw_cache[0, :, 0] = [7, 8, 9, 4, 5, 6]
    data = (Snapshotter(source, tmp_path / "o.snapshot.bin").save("").path).read_bytes()
    plane = np.roll(source.arena.views().kw_cache[0], -3, axis=0)  # 9 % 6 = 3: oldest
    assert list(plane[:, 0]) == [4, 5, 6, 7, 8, 9]
    assert plane.tobytes() in data


def test_another_per_layer_layout_is_refused_with_a_reason(tiny_model, tmp_path) -> None:
    path = Snapshotter(filled(hybrid(tiny_model), 10), tmp_path / "a.snapshot.bin").save("").path
    other = Conversation(hybrid(tiny_model, kinds=(FULL, WINDOW, CONV, WINDOW)), POLICY)
    with pytest.raises(SnapshotIdentityError, match="different per-layer state"):
        restore(other, path)
    theta = Conversation(hybrid(tiny_model, theta_window=9000.0), POLICY)
    with pytest.raises(SnapshotIdentityError, match="different per-layer state"):
        restore(theta, path)
    uniform = Snapshotter(filled(tiny_model, 10), tmp_path / "u.snapshot.bin").save("").path
    two_layers = hybrid(tiny_model, kinds=(WINDOW, FULL))  # the tiny model's geometry
    with pytest.raises(SnapshotIdentityError, match="every layer in the ring"):
        restore(Conversation(two_layers, POLICY), uniform)


def test_a_rollback_restores_the_planes(tiny_model) -> None:
    conv = filled(hybrid(tiny_model), 10)
    v = conv.arena.views()
    before = {name: getattr(v, name).copy() for name in ("kw_cache", "vw_cache", "conv_state")}
    mark = conv.ring.mark()
    span = conv.ring.reserve(2)  # two more tokens change every plane
    v.kw_cache += 1.0
    v.conv_state *= 2.0
    conv.ring.commit(span, v.mass)
    assert conv.ring.rollback(mark) == 2
    for name, saved in before.items():
        np.testing.assert_array_equal(getattr(v, name), saved)


def test_a_rebase_shifts_the_window_keys_by_the_same_distance(tiny_model) -> None:
    """The ring's positions are compacted; the window's keys all move by the newest slot's
    shift, so their distances to each other and to the next token stay what they were."""
    model = hybrid(tiny_model)
    conv = filled(model, 20)
    v = conv.arena.views()
    v.slot_pos[:20] = np.arange(100, 120)
    v.ring_counters[3] = 120  # next position
    keys = v.kw_cache.copy()
    rebase(conv.ring)
    assert conv.ring.next_pos == 20 and conv.ring.rebases == 1
    cfg, rope = model.config, model.rope_window
    shift = 20 - 120
    angle = shift * rope.inv_freq
    cos = np.cos(angle).astype(np.float32)[None, None, :]
    sin = np.sin(angle).astype(np.float32)[None, None, :]
    expected = keys.reshape(-1, cfg.n_kv_heads, cfg.head_dim).copy()
    a = np.empty(expected.shape[:-1] + (cfg.head_dim // 2,), np.float32)
    rope.rotate(expected, cos, sin, a, a.copy())
    np.testing.assert_allclose(v.kw_cache.reshape(expected.shape), expected, atol=1e-5)
