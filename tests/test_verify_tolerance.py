"""`channel snapshot verify`'s tolerance for K/V drift (engine/session/verify.py) lets a
quantized backend's rounding through, and still finds a key that belongs to another token."""

from __future__ import annotations

from pathlib import Path

from engine.backends.select import backend_for_model, fit_to_model
from engine.model.model import load_model
from engine.session.session import Session
from engine.session.verify import VerifyReport, compare
from engine.state.sampler import SamplingSettings

FIXTURE = Path(__file__).parent / "fixtures" / "arch" / "qwen35.gguf"


def test_verify_finds_a_key_of_another_token(tmp_path) -> None:
    # A quantized hybrid, the kind whose warm and cold keys differ the most (by rounding).
    model = load_model(FIXTURE, tmp_path / "cache")
    choice = backend_for_model("auto", FIXTURE, tmp_path / "cache")
    backend = fit_to_model(choice, "auto", model.config).backend
    live = Session(model, tmp_path / "data", "s", backend=backend)
    live.boot()
    live.turn("the keys of two tokens", SamplingSettings(), max_tokens=6)
    assert live.save().error is None

    warm = Session(model, tmp_path / "data", "s", backend=backend)
    assert warm.boot().kind == "warm"
    cold = Session(model, tmp_path / "data", "s", backend=backend)
    cold.boot(cold=True)

    def report() -> VerifyReport:
        found = VerifyReport("s", "warm", "", warm.conversation.ring.clock,
                             cold.conversation.ring.clock)
        compare(warm, cold, found)
        return found

    assert report().ok, report().problems
    keys = warm.conversation.arena.views().k_cache  # (layers, slots, kv_dim)
    n = warm.conversation.ring.n_active
    keys[:, [1, n - 2]] = keys[:, [n - 2, 1]]  # two slots' keys swapped
    found = report()
    assert not found.ok
    assert any(p.startswith("k_cache differs") for p in found.problems), found.problems
