"""The state arena: one aligned allocation, views inside it, generation-checked staleness."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest

from engine.align import ALIGN
from engine.errors import LayoutError, StaleViewError
from engine.state.arena import StateArena, anonymous_memory, conversation_layout
from engine.state.layout import ArenaLayout
from engine.state.ring_policy import RingPolicy

from .test_layout import SMOLLM2, TINY


def test_every_view_lies_inside_the_one_aligned_allocation() -> None:
    arena = StateArena(conversation_layout(TINY, RingPolicy().scaled_to(64)))
    base = arena.base_address
    assert base % ALIGN == 0
    views = arena.views()
    for r in arena.layout.regions:
        view = getattr(views, r.name)
        assert view.ctypes.data == base + r.offset, r.name
        assert view.nbytes == r.nbytes
        assert view.dtype == r.dtype and view.shape == r.shape
        assert not view.flags.owndata


def test_one_numerical_payload_allocation_per_conversation() -> None:
    layout = conversation_layout(SMOLLM2, RingPolicy())
    calls = []

    def counting(nbytes: int) -> np.ndarray:
        calls.append(nbytes)
        return anonymous_memory(nbytes)

    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        arena = StateArena(layout, counting)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    assert calls == [layout.total_bytes + ALIGN]
    # Nothing else of any size was allocated for numbers: no numpy buffer beyond a page.
    flt = [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)]
    diff = after.filter_traces(flt).compare_to(before.filter_traces(flt), "traceback")
    assert not [s for s in diff if s.size_diff > 4096], [str(s) for s in diff][:3]
    assert arena.nbytes == layout.total_bytes
    views = arena.views()
    assert views.k_cache.base is not None  # a view, not a separate buffer
    assert all(getattr(views, r.name).ctypes.data >= arena.base_address for r in layout.regions)


def test_views_go_stale_after_reset_and_restore() -> None:
    arena = StateArena(conversation_layout(TINY, RingPolicy().scaled_to(64)))
    old = arena.views()
    assert old.check() is old
    arena.reset()
    with pytest.raises(StaleViewError, match="generation 0"):
        old.check()
    current = arena.views()
    current.check()
    arena.invalidate()  # what a restore does
    with pytest.raises(StaleViewError):
        current.check()


@pytest.mark.parametrize("backend", ["numpy", "ggml"])
def test_a_dropped_conversation_frees_its_arena_at_once(tiny_model, backend) -> None:
    """Without waiting for the cyclic collector: an engine that opens session after session
    must not hold each earlier one's arena (views once pointed back at their arena)."""
    import weakref  # noqa: PLC0415

    from engine.conversation import Conversation  # noqa: PLC0415

    if backend == "ggml":
        pytest.importorskip("ggml", reason="ggml-python is not installed")
        from engine.backends.ggml.backend import GgmlBackend as Backend  # noqa: PLC0415
    else:
        from engine.backends.numpy.backend import NumpyBackend as Backend  # noqa: PLC0415
    gc.collect()
    gc.disable()
    try:
        conv = Conversation(tiny_model, backend=Backend())
        conv.ingest([1, 2, 3])
        conv.forward.decode_one_token(4)
        views, arena = conv.arena.views(), weakref.ref(conv.arena)
        del conv
        assert arena() is None
        with pytest.raises(StaleViewError, match="freed"):
            views.check()
    finally:
        gc.enable()


def test_reset_zeroes_state_but_keeps_constants() -> None:
    arena = StateArena(conversation_layout(TINY, RingPolicy().scaled_to(64)))
    v = arena.views()
    v.k_cache[:] = 1.0
    v.ring_counters[:] = 7
    arena.reset()
    v = arena.views()
    assert not v.k_cache.any() and not v.ring_counters.any()
    assert v.p_causal[0, 1] == -np.inf and v.p_causal[1, 0] == 0.0
    assert list(v.slot_index[:4]) == [0, 1, 2, 3]


def test_unsealed_layout_cannot_back_an_arena() -> None:
    lay = ArenaLayout()
    lay.add("a", np.float32, (4,))
    with pytest.raises(LayoutError, match="sealed"):
        StateArena(lay)
