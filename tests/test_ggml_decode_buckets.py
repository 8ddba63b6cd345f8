"""The ggml decode graphs' buckets (engine/backends/ggml/forward.py decode_bucket): a young
conversation's step attends over 64 or 128 slots rather than 256. The slots past the live
ones are masked to exact zeros, so every bucket must give the same logits, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from engine.state.ring_policy import RingPolicy

from .parity import run_steps, tiny

pytest.importorskip("ggml", reason="ggml-python is not installed (needs a C compiler)")

from engine.backends.ggml import forward  # noqa: E402


def test_decode_bucket_takes_the_smallest_that_covers_the_slots() -> None:
    assert [forward.decode_bucket(n) for n in (1, 64, 65, 128, 129, 256, 257, 4000)] == [
        64, 64, 128, 128, 256, 256, 512, 4096]


def test_small_buckets_give_the_logits_of_256_slot_graphs(tmp_path_factory,
                                                          monkeypatch) -> None:
    from engine.backends.ggml.backend import GgmlBackend

    model = tiny(tmp_path_factory, QT.Q4_0, context_length=1024)
    policy = RingPolicy(max_slots=512, recent_window=32, evict_batch=16, prefill_chunk=32)
    ids = [int(t) for t in np.random.default_rng(5).integers(3, 250, 140)]  # past 64 and 128
    small, conv = run_steps(model, GgmlBackend(), ids, policy)
    assert {bucket for bucket, _ in conv.forward._decode} == {64, 128, 256}
    monkeypatch.setattr(forward, "SMALL_BUCKETS", ())
    whole, conv = run_steps(model, GgmlBackend(), ids, policy)
    assert {bucket for bucket, _ in conv.forward._decode} == {256}
    np.testing.assert_array_equal(small, whole)
