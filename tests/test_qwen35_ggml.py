"""Qwen3.5 on the ggml backend, held to the numpy reference on a float32 tiny model (so the
only differences are f16 keys and summation order): prefill chunks of every size, decode
through eviction and rebase, the DELTA layers' carries and states, and a session saved on
numpy continuing on ggml. tests/test_arch_reference.py holds ggml to transformers on the
quantized fixture.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine.allocs import measure_allocations
from engine.backends.ggml.lib import available as ggml_available
from engine.backends.numpy.backend import NumpyBackend
from engine.conversation import Conversation
from engine.model.model import load_model
from engine.session.fork import fork_session
from engine.session.session import Session
from engine.state.ring_policy import RingPolicy
from engine.state.sampler import SamplingSettings

from .parity import prefill_row_logits
from .test_qwen35 import write_qwen35

if ggml_available() is not None:
    pytest.skip(f"ggml is not built here: {ggml_available()}", allow_module_level=True)

from engine.backends.ggml.backend import GgmlBackend  # noqa: E402

TOLERANCE = 1e-3  # of the peak logit: f16 keys in the ring, f32 everywhere else
PLANES = ("delta_conv", "delta_state")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("q35-f32")
    return load_model(write_qwen35(path, context_length=40), path / "cache")


def test_prefill_chunks_of_every_size_match_numpy(model) -> None:
    """Chunks of 1 (a decode-shaped graph), 3 (the carry's length), 8 and the whole input."""
    ids = [int(t) for t in np.random.default_rng(9).integers(4, 4000, 30)]
    for chunk in (1, 3, 8, 30):
        policy = RingPolicy(max_slots=32, recent_window=8, evict_batch=4, prefill_chunk=chunk)
        want = prefill_row_logits(model, ids, None, policy)
        got = prefill_row_logits(model, ids, GgmlBackend(), policy)
        np.testing.assert_allclose(got, want, atol=TOLERANCE * np.abs(want).max(), rtol=0,
                                   err_msg=str(chunk))


def test_decode_through_eviction_and_rebase_matches_numpy(model) -> None:
    small = RingPolicy(max_slots=24, recent_window=4, evict_batch=3, prefill_chunk=5)
    ids = [int(t) for t in np.random.default_rng(1).integers(4, 4000, 80)]
    runs, convs = [], []
    for backend in (None, GgmlBackend()):
        conv = Conversation(model, small, backend=backend)
        conv.ingest(ids[:5])
        runs.append(np.stack([conv.forward.decode_one_token(t).copy() for t in ids[5:]]))
        convs.append(conv)
    assert convs[1].ring.rebases >= 2 and convs[1].ring.rebases == convs[0].ring.rebases
    np.testing.assert_allclose(runs[1], runs[0], atol=TOLERANCE * np.abs(runs[0]).max(), rtol=0)
    for name in PLANES:
        want = getattr(convs[0].arena.views(), name)
        np.testing.assert_allclose(getattr(convs[1].arena.views(), name), want,
                                   atol=1e-4 * np.abs(want).max(), rtol=0, err_msg=name)


def test_a_session_saved_on_numpy_continues_on_ggml(model, tmp_path) -> None:
    """The planes' layout is the same on both backends (each head's state transposed, as
    ggml_gated_delta_net keeps it): ggml boots warm from numpy's snapshot, holds its planes
    exactly, and gives the same next reply."""
    policy = RingPolicy(max_slots=40, recent_window=8, evict_batch=8, prefill_chunk=16)
    greedy = SamplingSettings()
    live = Session(model, tmp_path, "live", policy, NumpyBackend())
    live.boot()
    live.turn("Tell me about the sea.", greedy, max_tokens=8)
    assert live.save().status.name == "SAVED"
    fork_session(tmp_path, "live", "moved")
    moved = Session(model, tmp_path, "moved", policy, GgmlBackend())
    assert moved.boot().kind == "warm"
    for name in PLANES:
        np.testing.assert_array_equal(getattr(moved.conversation.arena.views(), name),
                                      getattr(live.conversation.arena.views(), name))
    want = live.turn("And the mountains?", greedy, max_tokens=8)
    got = moved.turn("And the mountains?", greedy, max_tokens=8)
    assert got.reply_ids == want.reply_ids and len(want.reply_ids) > 0


def test_decode_allocates_nothing_through_eviction_and_rebase(model) -> None:
    """ggml's decode graphs write the delta planes in place: once a graph is built for the
    ring's bucket, a step allocates no numpy buffer, through evictions and rebases too."""
    conv = Conversation(model, RingPolicy(max_slots=24, recent_window=4, evict_batch=3,
                                          prefill_chunk=5), backend=GgmlBackend())
    conv.ingest([5, 6, 7])
    token = iter(range(10**6))

    def step() -> None:
        conv.forward.decode_one_token(4 + next(token) % 4000)

    for _ in range(60):
        step()
    report = measure_allocations(step, repeat=120)
    assert conv.ring.evicted > 0 and conv.ring.rebases > 0
    assert report.numpy_new_buffers == 0 and report.numpy_net_bytes <= 0
