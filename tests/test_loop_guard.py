"""The loop guard (engine/state/loop_guard.py): a reply caught in a cycle is stopped, a list or
code that repeats itself legitimately is not; and a greedy reply that loops on the shipped
model ends with `stop: "repetition"`."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.session.session import Session
from engine.state.loop_guard import MIN_SPAN, LoopGuard
from engine.state.ring_policy import RingPolicy
from engine.state.sampler import SamplingSettings


def fired_at(guard: LoopGuard, tokens: list[int]) -> int | None:
    """How many tokens the guard took before it fired (None: it never did)."""
    guard.reset()
    for n, token in enumerate(tokens, 1):
        if guard.push(token):
            return n
    return None


@pytest.fixture(scope="module")
def guard(real_model) -> LoopGuard:
    return LoopGuard(real_model.tokenizer)


@pytest.fixture(scope="module")
def encode(real_model):
    return lambda text: real_model.tokenizer.encode(text, parse_special=False)


def test_a_forced_cycle_is_caught_soon(guard, encode) -> None:
    opening = encode("L'Étoile, la Marseillaise, la femme,")
    cycle = encode(" la femme au martyre,")
    tokens = opening + cycle * 40
    n = fired_at(guard, tokens)
    assert n is not None and guard.period == len(cycle)
    # It fires once the cycle covers MIN_SPAN tokens (the opening's " la femme," may count
    # towards it), within one more copy of it.
    assert MIN_SPAN <= n <= len(opening) + MIN_SPAN + len(cycle)
    assert guard.looping_tokens >= MIN_SPAN


def test_a_single_token_repeated_forever_is_caught(guard, encode) -> None:
    assert fired_at(guard, encode("Sure") + encode("\n") * 300) is not None
    assert guard.period == 1


def test_a_numbered_list_is_not_a_loop(guard, encode) -> None:
    same_items = "".join(f"{i}. Add one cup of flour.\n" for i in range(1, 60))
    short_items = "".join(f"{i}. a\n" for i in range(1, 200))
    for text in (same_items, short_items):
        tokens = encode(text)
        assert len(tokens) > 4 * MIN_SPAN
        assert fired_at(guard, tokens) is None, text[:40]


CODE = '''class Point:
    def __init__(self, x, y, z):
        self.x = x
        self.y = y
        self.z = z

    def scaled(self, k):
        return Point(self.x * k, self.y * k, self.z * k)


identity = [
    [1, 0, 0, 0],
    [0, 1, 0, 0],
    [0, 0, 1, 0],
    [0, 0, 0, 1],
]
zeros = [[0, 0, 0, 0, 0, 0, 0, 0],
         [0, 0, 0, 0, 0, 0, 0, 0],
         [0, 0, 0, 0, 0, 0, 0, 0],
         [0, 0, 0, 0, 0, 0, 0, 0],
         [0, 0, 0, 0, 0, 0, 0, 0],
         [0, 0, 0, 0, 0, 0, 0, 0],
         [0, 0, 0, 0, 0, 0, 0, 0],
         [0, 0, 0, 0, 0, 0, 0, 0]]
buffer = bytes([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
print("-" * 40)
print("x", "y", "z")
print("=" * 40)
'''
TABLE = "| name | value |\n|------|-------|\n" + "".join(
    f"| item {i} | {i * 3} |\n" for i in range(40))


def test_code_and_tables_are_not_loops(guard, encode) -> None:
    for text in (CODE, TABLE):
        tokens = encode(text)
        assert len(tokens) > 2 * MIN_SPAN
        assert fired_at(guard, tokens) is None, text[:40]


def test_a_line_of_letters_copied_many_times_is_a_loop(guard, encode) -> None:
    # Where legitimate repetition ends and a loop begins: the same line with words in it,
    # copied again and again (the haiku loop of issue 29).
    tokens = encode("In the heart of autumn,\n") + encode("A moment of stillness,\n") * 20
    assert fired_at(guard, tokens) is not None


def test_bad_thresholds_are_refused() -> None:
    with pytest.raises(ValueError, match="loop guard"):
        LoopGuard(min_span=300, structure_span=256)


@pytest.mark.real_model
def test_a_greedy_reply_that_loops_is_stopped(real_model, tmp_path: Path) -> None:
    """Issue 29's first answer: greedy decoding of this question on the shipped model with
    the default (ggml) backend loops, as llama.cpp's does ("la femme au martyre, la femme au
    martyre, ..."); the guard ends it long before the cap."""
    pytest.importorskip("ggml", reason="ggml-python is not installed (needs a C compiler)")
    from engine.backends.ggml.backend import GgmlBackend

    session = Session(real_model, tmp_path, "s", RingPolicy().scaled_to(512),
                      backend=GgmlBackend())
    session.boot()
    result = session.turn("What is the capital of France?", SamplingSettings(), 400)
    assert result.stop == "repetition"
    assert len(result.reply_ids) < 150
    assert session.stream.read().events[-1].extra["stop"] == "repetition"
