"""A warm boot of a hybrid session gives the same next reply as the process that saved it
(issue 27): the window planes, conv carries and delta-rule states come back exactly, on
numpy and on ggml, and on Vulkan."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.backends.ggml.lib import available as ggml_available
from engine.backends.numpy.backend import NumpyBackend
from engine.model.model import load_model
from engine.session.fork import fork_session
from engine.session.session import Session
from engine.state.ring_policy import RingPolicy
from engine.state.sampler import SamplingSettings

from .conftest import make_vk_backend

FIXTURES = Path(__file__).parent / "fixtures" / "arch"
POLICY = RingPolicy(max_slots=96, recent_window=8, evict_batch=8, prefill_chunk=16)
GREEDY = SamplingSettings()


def backend(name: str):
    if name == "numpy":
        return NumpyBackend()
    if name == "vulkan":
        return make_vk_backend(None)  # skips without a device
    if ggml_available() is not None:
        pytest.skip(f"ggml is not built here: {ggml_available()}")
    from engine.backends.ggml.backend import GgmlBackend

    return GgmlBackend()


@pytest.mark.parametrize("fixture,backend_name", [
    (fixture, name) for fixture in ("gemma3", "lfm2", "qwen35") for name in ("numpy", "ggml")
] + [(fixture, "vulkan") for fixture in ("gemma3", "lfm2", "qwen35")])
def test_the_next_reply_after_a_warm_boot_is_the_saving_process_s(fixture, backend_name,
                                                                 tmp_path) -> None:
    model = load_model(FIXTURES / f"{fixture}.gguf", tmp_path / "cache")
    live = Session(model, tmp_path, "live", POLICY, backend(backend_name))
    live.boot()
    live.turn("Tell me about the sea, in a few words.", GREEDY, max_tokens=12)
    assert live.save().status.name == "SAVED"
    fork_session(tmp_path, "live", "restarted")  # what a restart finds on disk
    restarted = Session(model, tmp_path, "restarted", POLICY, backend(backend_name))
    report = restarted.boot()
    assert report.kind == "warm" and report.replayed_events == 0
    want = live.turn("And the mountains?", GREEDY, max_tokens=12)
    got = restarted.turn("And the mountains?", GREEDY, max_tokens=12)
    assert got.reply_ids == want.reply_ids and len(want.reply_ids) > 0
