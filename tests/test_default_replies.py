"""The first answers a new user gets (issue 29): the shipped model, a fresh session, every
setting as it comes. Each reply must end by itself (an end-of-generation token, not the
token cap or the loop guard) and must not go round in circles."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.session.session import Session
from engine.state.sampling_defaults import defaults_for

pytestmark = pytest.mark.real_model

# Six everyday prompts, asked one after another in one fresh session, as a new user would.
PROMPTS = ["What is the capital of France?", "Write a haiku about autumn",
           "Give me three tips for sleeping better.",
           "Explain what a black hole is in two sentences.",
           "How do I reverse a list in Python?", "Translate 'good morning' into Spanish."]
CAP = 512  # the app's reply cap


def repeated_run(text: str, words: int = 4, times: int = 4) -> str | None:
    """A run of `words` words that occurs `times` times or more in `text`, if any."""
    tokens = re.findall(r"\w+", text.lower())
    counts: dict[tuple[str, ...], int] = {}
    for i in range(len(tokens) - words + 1):
        run = tuple(tokens[i:i + words])
        counts[run] = counts.get(run, 0) + 1
        if counts[run] >= times:
            return " ".join(run)
    return None


def test_the_repeated_run_check_finds_a_loop() -> None:
    assert repeated_run("la femme au martyre, " * 4) == "la femme au martyre"
    assert repeated_run("The capital of France is Paris.") is None


@pytest.fixture(scope="module")
def backend():
    """The app's default on a CPU: ggml (the numpy reference where ggml is missing)."""
    from engine.backends.ggml.lib import available as ggml_problem
    from engine.backends.select import choose_backend

    return choose_backend("numpy" if ggml_problem() else "ggml").backend


def test_default_replies_end_by_themselves(real_model, backend, tmp_path: Path) -> None:
    session = Session(real_model, tmp_path, "first", backend=backend)
    session.boot()
    settings = defaults_for(real_model.recommended_sampling)
    for prompt in PROMPTS:
        result = session.turn(prompt, settings, CAP)
        print(f"\n{prompt!r} -> {result.reply!r} ({result.stop}, {len(result.reply_ids)} "
              f"tokens, seed {result.seed})")
        assert result.stop == "eot", (prompt, result.reply)
        assert result.reply.strip() and repeated_run(result.reply) is None, result.reply
