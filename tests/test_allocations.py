"""After a conversation is ready, decoding allocates no numpy buffers; images are shared."""

from __future__ import annotations

import numpy as np
import pytest

from engine.allocs import measure_allocations
from engine.conversation import Conversation
from engine.state.ring_policy import RingPolicy

from .test_kv_format import ByDimensionNumpy


def test_steady_state_decode_allocates_no_numpy_buffers(real_model) -> None:
    conv = Conversation(real_model, RingPolicy(max_slots=1024))
    conv.ingest(list(range(1000, 1040)))
    token = iter(range(2000, 3000))
    conv.forward.decode_one_token(next(token))  # warm-up outside the measurement
    short = measure_allocations(lambda: conv.forward.decode_one_token(next(token)), repeat=6)
    conv.ingest(list(range(3000, 3600)))
    long = measure_allocations(lambda: conv.forward.decode_one_token(next(token)), repeat=6)
    for report in (short, long):
        assert report.numpy_new_buffers == 0
        assert report.numpy_net_bytes <= 0
    # Any temporary activation would be at least d_model floats, and attention temporaries
    # would grow with the context (40 -> 650 slots); the transient peak does neither.
    d_bytes = real_model.config.d_model * 4
    assert long.peak_transient_bytes < 4 * d_bytes
    assert abs(long.peak_transient_bytes - short.peak_transient_bytes) < d_bytes


@pytest.mark.parametrize("values", ["by slot", "by dimension"])
def test_eviction_and_rebase_do_not_grow_memory(tiny_model, values) -> None:
    policy = RingPolicy(max_slots=64, recent_window=8, evict_batch=8, prefill_chunk=16)
    backend = ByDimensionNumpy() if values == "by dimension" else None
    conv = Conversation(tiny_model, policy, backend=backend)
    conv.ingest([1, 2, 3], anchors=True)
    token = iter(range(10**6))

    def step() -> None:
        conv.forward.decode_one_token(3 + next(token) % 200)

    for _ in range(300):  # reach steady state: full ring, evictions and rebases happening
        step()
    report = measure_allocations(step, repeat=300)
    assert conv.ring.evicted > 0 and conv.ring.rebases > 0
    assert report.numpy_new_buffers == 0 and report.numpy_net_bytes <= 0


def test_two_conversations_share_one_image_and_stay_independent(tiny_model) -> None:
    prompt_a, prompt_b = [5, 6, 7, 8, 9], [100, 90, 80]
    alone = Conversation(tiny_model, RingPolicy().scaled_to(64))
    alone.ingest(prompt_a)
    expected = [alone.forward.decode_one_token(t).copy() for t in (11, 12, 13)]

    a = Conversation(tiny_model, RingPolicy().scaled_to(64))
    b = Conversation(tiny_model, RingPolicy().scaled_to(64))
    assert a.forward.w is b.forward.w is tiny_model.weights
    assert a.arena.base_address != b.arena.base_address
    a.ingest(prompt_a)
    b.ingest(prompt_b)
    got = []
    for t in (11, 12, 13):
        got.append(a.forward.decode_one_token(t).copy())
        b.forward.decode_one_token(t + 50)  # interleaved traffic on the other conversation
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)
    assert a.ring.n_active == 8 and b.ring.n_active == 6
    assert not tiny_model.weights.token_embd.flags.writeable  # the image is read-only
