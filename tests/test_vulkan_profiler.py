"""The per-dispatch timer (engine/backends/vulkan/profiler.py) on a real Vulkan device (lavapipe
in CI): every dispatch of a step gets a label and a duration, timing changes no result, and a
pass recorded without it carries no timestamps."""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as QT

from engine.backends.vulkan.profiler import DispatchTimer, summarize
from engine.conversation import Conversation
from engine.state.ring_policy import RingPolicy

from .parity import tiny

POLICY = RingPolicy(max_slots=64, recent_window=4, evict_batch=4, prefill_chunk=16)


def test_every_decode_dispatch_is_timed_and_results_stay(tmp_path_factory, vk_backend) -> None:
    model = tiny(tmp_path_factory, QT.Q8_0)
    layers = model.config.n_layers
    timed = Conversation(model, POLICY, backend=vk_backend)
    plain = Conversation(model, POLICY, backend=vk_backend)
    for conv in (timed, plain):
        conv.ingest([5, 6, 7, 8, 9])
    timer = DispatchTimer(vk_backend.ctx)
    timed.forward.set_timer(timer)
    samples = []
    for token in (11, 12, 13):
        logits = timed.forward.decode_one_token(token)
        samples.append(timer.read())
        np.testing.assert_array_equal(logits, plain.forward.decode_one_token(token))
    for step in samples:
        labels = [label for label, _ in step]
        # Every dispatch, plus the logits copy where the arena is not host-cached.
        copies = labels.count("copy:logits")
        assert len(labels) == timed.forward.dispatches_per_token + copies
        assert labels.count("attention_split") == layers
        assert labels.count(f"matmul:qkv:K{model.config.d_model}") == layers
        assert all(us >= 0.0 for _, us in step)
    summary = summarize(samples)
    assert summary["total"]["dispatches"] == len(samples[0])
    assert summary["total"]["us"] > 0.0
    assert summary["attention_split"]["dispatches"] == layers

    timed.forward.set_timer(None)  # re-recorded without timestamps
    np.testing.assert_array_equal(timed.forward.decode_one_token(14),
                                  plain.forward.decode_one_token(14))
    assert timed.forward.recorder.timer is None
