"""A snapshot saved on one backend restores on the other: same layout, same KV dtype."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from engine.conversation import Conversation
from engine.model.layer_kinds import CONV, FULL
from engine.snapshot.chain import restore
from engine.snapshot.snapshotter import Snapshotter
from engine.state.arena import LAYER_PLANES
from engine.state.ring_policy import RingPolicy

from .parity import tiny

POLICY = RingPolicy(max_slots=64, recent_window=8, evict_batch=8, prefill_chunk=16)
PROMPT = [1, 40, 77, 200, 13, 99, 5, 250, 31, 64, 128, 7]


@pytest.fixture(scope="module", params=["llama", "lfm2", "qwen35"])
def any_model(request, tmp_path_factory):
    """The tiny llama, and hybrids whose layer planes (conv carries; delta-rule carries and
    states) a snapshot holds beside the ring."""
    if request.param == "llama":
        return request.getfixturevalue("tiny_model")
    shape = {"lfm2": {"n_layers": 3, "layer_kinds": (CONV, FULL, CONV)},
             "qwen35": {"n_layers": 4, "head_dim": 32, "rope_dim": 8}}[request.param]
    return tiny(tmp_path_factory, QT.F32, architecture=request.param, **shape)


@pytest.mark.parametrize("direction", ["numpy->vulkan", "vulkan->numpy"])
def test_snapshot_crosses_backends(any_model, vk_backend, tmp_path, direction) -> None:
    from engine.backends.numpy.backend import NumpyBackend

    tiny_model = any_model
    source_backend, target_backend = (
        (NumpyBackend(), vk_backend) if direction == "numpy->vulkan" else
        (vk_backend, NumpyBackend()))
    source = Conversation(tiny_model, POLICY, backend=source_backend)
    source.ingest(PROMPT)
    path = Snapshotter(source, tmp_path / "x.snapshot.bin").save("").path
    target = Conversation(tiny_model, POLICY, backend=target_backend)
    restore(target, path)
    n = source.ring.n_active
    a, b = source.arena.views(), target.arena.views()
    np.testing.assert_array_equal(a.k_cache[:, :n], b.k_cache[:, :n])
    np.testing.assert_array_equal(a.slot_pos[:n], b.slot_pos[:n])
    for name in LAYER_PLANES:
        if name in source.arena.layout:
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    # Both continue identically from the restored state (to float tolerance across backends).
    la = source.forward.decode_one_token(42)
    lb = target.forward.decode_one_token(42)
    np.testing.assert_allclose(la, lb, atol=5e-5)


def test_a_chain_saved_on_vulkan_restores_on_numpy(tiny_model, vk_backend, tmp_path,
                                                  staging) -> None:
    """Segments read only their rows off the device (read_regions' `rows`), both paths."""
    from engine.backends.numpy.backend import NumpyBackend

    source = Conversation(tiny_model, POLICY, backend=vk_backend)
    source.ingest(PROMPT)
    saver = Snapshotter(source, tmp_path / "c.snapshot.bin", compact_share=float("inf"))
    assert saver.save("").kind == "full"
    for step in range(3):  # 20 tokens a segment: the 64-slot ring evicts along the way
        source.ingest([(11 * step + t) % 250 + 3 for t in range(20)])
        assert saver.save("").kind == "segment"
    target = Conversation(tiny_model, POLICY, backend=NumpyBackend())
    report = restore(target, saver.path)
    n = source.ring.n_active
    assert report.segments == 3 and report.n_active == n and source.ring.evicted > 0
    a, b = source.arena.views(), target.arena.views()
    np.testing.assert_array_equal(a.k_cache[:, :n], b.k_cache[:, :n])
    np.testing.assert_array_equal(a.v_cache[:, :n], b.v_cache[:, :n])
    np.testing.assert_array_equal(a.slot_clock[:n], b.slot_clock[:n])
