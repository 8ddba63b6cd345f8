"""A snapshot saved on one backend restores on the other: same layout, same KV dtype."""

from __future__ import annotations

import numpy as np
import pytest

from engine.conversation import Conversation
from engine.snapshot.chain import restore
from engine.snapshot.snapshotter import Snapshotter
from engine.state.ring_policy import RingPolicy

POLICY = RingPolicy(max_slots=64, recent_window=8, evict_batch=8, prefill_chunk=16)
PROMPT = [1, 40, 77, 200, 13, 99, 5, 250, 31, 64, 128, 7]


@pytest.mark.parametrize("direction", ["numpy->vulkan", "vulkan->numpy"])
def test_snapshot_crosses_backends(tiny_model, vk_backend, tmp_path, direction) -> None:
    from engine.backends.numpy.backend import NumpyBackend

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
    # Both continue identically from the restored state (to float tolerance across backends).
    la = source.forward.decode_one_token(42)
    lb = target.forward.decode_one_token(42)
    np.testing.assert_allclose(la, lb, atol=5e-5)
