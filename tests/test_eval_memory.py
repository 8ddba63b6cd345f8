"""`channel eval memory`: its conversations, its one-pass scoring, and its output, on a tiny
model with a context long enough for the quick evaluation."""

from __future__ import annotations

import json
import math

import pytest
from gguf import GGMLQuantizationType as QT

from engine.conversation import Conversation
from engine.state.ring_policy import DEFAULT_EVICT, EVICT_POLICIES, RingPolicy
from engine.tools.eval_memory import QUICK, Tally, evaluate_memory, score_conversation, segments_of
from engine.tools.eval_memory_facts import make_dialogue
from engine.tools.perplexity import read_and_score

from .parity import tiny


@pytest.fixture(scope="module")
def long_tiny(tmp_path_factory):
    return tiny(tmp_path_factory, QT.F32, context_length=2048)


def test_dialogues_are_seeded_and_filler_never_gives_an_answer() -> None:
    a, b = make_dialogue(3, 4, 6, 2), make_dialogue(3, 4, 6, 2)
    assert a == b and a != make_dialogue(4, 4, 6, 2)
    assert len(a.facts) == 4 and len(a.messages) == 1 + 2 * 4 + 2 * 6
    filler = " ".join(m["content"] for m in a.messages[9:])
    for fact in a.facts:
        assert fact.answer in fact.statement and fact.answer not in filler
    with pytest.raises(ValueError, match="facts must be between 1 and 8"):
        make_dialogue(0, 9, 1, 1)


def test_one_pass_scores_every_token_like_the_perplexity_tool(long_tiny) -> None:
    segments = segments_of(long_tiny, make_dialogue(0, 2, 2, 1))
    ids = [t for s in segments for t in s.tokens]
    assert segments[0].anchors and sum(s.answer for s in segments) == 2
    tally = Tally()
    full = RingPolicy(max_slots=1024)
    score_conversation(Conversation(long_tiny, full), segments, tally)
    assert tally.predicted == len(ids) - 1 and tally.questions == 2
    reference = read_and_score(Conversation(long_tiny, full), ids)
    assert math.exp(tally.nll / tally.predicted) == pytest.approx(reference["perplexity"],
                                                                  rel=1e-3)


def test_quick_evaluation_has_the_issue_s_shape(long_tiny) -> None:
    seen = []
    result = evaluate_memory(long_tiny, None, QUICK, lambda d, t, _: seen.append((d, t)))
    assert set(result) == {"default", "full", "policies"} and result["default"] == DEFAULT_EVICT
    assert set(result["policies"]) == set(EVICT_POLICIES)
    runs = 1 + len(EVICT_POLICIES) * 3  # the full ring, then each policy at three budgets
    assert seen[0][0] == 0 and seen[-1][0] == seen[-1][1] == runs * 2  # the text + 1 dialogue
    for scores in [result["full"]] + [s for p in result["policies"].values() for s in p.values()]:
        assert set(scores) == {"ppl", "recall_exact", "answer_logprob", "dialogue_ppl"}
        assert scores["ppl"] > 1 and scores["dialogue_ppl"] > 1
        assert 0 <= scores["recall_exact"] <= 1
        assert scores["answer_logprob"] < 0
    for budgets in result["policies"].values():
        assert list(budgets) == ["0.125", "0.25", "0.5"]
    # Evicting changes what the model sees: the smallest window reads differently.
    assert result["policies"]["window"]["0.125"]["ppl"] != result["full"]["ppl"]


def test_cli_prints_json_a_table_and_a_plot(long_tiny, capsys, tmp_path) -> None:
    from channel_cli.cli import main

    common = ["eval", "memory", "--quick", "--model", str(long_tiny.path), "--cache-dir",
              str(long_tiny.path.parent / "cache"), "--backend", "numpy"]
    plot = tmp_path / "plots" / "memory.png"
    assert main([*common, "--json", "--plot", str(plot)]) == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["policies"]["h2o"]["0.25"]["ppl"] > 1
    runs = 2 * (1 + len(EVICT_POLICIES) * 3)
    assert f"{runs}/{runs}" in captured.err  # the progress bar reached its end
    assert main(common) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["policy", "budget", "ppl"]
    assert len(table) == 2 + len(EVICT_POLICIES) * 3 + 1
    starred = [line for line in table[2:-1] if line.split()[0] == f"{DEFAULT_EVICT}*"]
    assert len(starred) == 3 and table[2].startswith(EVICT_POLICIES[0])


def test_a_conversation_longer_than_the_context_is_refused(tiny_model) -> None:
    with pytest.raises(ValueError, match="does not fit the model's context"):
        evaluate_memory(tiny_model, None, QUICK)


def test_plot_without_matplotlib_is_one_line_before_any_work(long_tiny, capsys,
                                                             monkeypatch) -> None:
    import importlib.util

    from channel_cli.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert main(["eval", "memory", "--quick", "--model", str(long_tiny.path), "--plot",
                 "x.png", "--backend", "numpy"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "channel: error: --plot needs matplotlib: pip install 'channel[plot]'"


def test_the_perplexity_text_is_the_licences_as_alternating_messages(long_tiny) -> None:
    from engine.tools.eval_memory_text import licence_dialogue, licence_text

    def count(text: str) -> int:
        return len(long_tiny.tokenizer.encode(text))

    dialogue = licence_dialogue(count, 600, message_tokens=100)
    roles = [m["role"] for m in dialogue.messages]
    assert roles[0] == "system" and roles[1::2] == ["user"] * len(roles[1::2])
    assert set(roles[2::2]) == {"assistant"}
    bodies = [m["content"] for m in dialogue.messages[1:]]
    assert sum(count(b) for b in bodies) >= 600 and all(count(b) >= 100 for b in bodies)
    assert "GNU GENERAL PUBLIC LICENSE" in bodies[0]
    assert all(b.replace("\n\n", " ")[:40].split()[0] in licence_text() for b in bodies)
    segments = segments_of(long_tiny, dialogue)
    assert [s.turn_start for s in segments[1:]] == [r == "user" for r in roles[1:]]
    with pytest.raises(ValueError, match="fewer than"):
        licence_dialogue(count, 10**7)
