"""Sessions: the stream and the ring kept in step, cold replay, and continuing a conversation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.session.session import Session, check_session_name
from engine.session.transcript import encode_with_content
from engine.state.ring_policy import RingPolicy
from engine.state.sampler import SamplingSettings

GREEDY = SamplingSettings()
POLICY = RingPolicy().scaled_to(256)


def test_turn_logs_user_first_then_reply(tiny_model, tmp_path: Path) -> None:
    session = Session(tiny_model, tmp_path, "s", POLICY)
    session.boot()
    seen_on_disk = []

    def on_text(piece: str) -> None:
        seen_on_disk.append(session.stream.path.read_text())

    result = session.turn("hello there", GREEDY, max_tokens=6, on_text=on_text)
    events = session.stream.read().events
    assert [e.role for e in events] == ["system", "user", "assistant"]
    assert events[1].content == "hello there"
    if seen_on_disk:  # the user line was durable before any reply text existed
        assert "hello there" in seen_on_disk[0] and '"assistant"' not in seen_on_disk[0]
    assert events[2].content == result.reply
    assert events[2].extra["tokens"] == result.reply_ids
    assert events[2].extra["model"] == tiny_model.fingerprint
    assert result.stop in ("eot", "max_tokens")


def test_cold_replay_rebuilds_the_live_ring(tiny_model, tmp_path: Path) -> None:
    live = Session(tiny_model, tmp_path, "s", POLICY)
    live.boot()
    live.turn("first question", GREEDY, max_tokens=5)
    live.turn("second question", GREEDY, max_tokens=5)
    ring = live.conversation.ring
    n = ring.n_active

    replayed = Session(tiny_model, tmp_path, "s", POLICY)
    report = replayed.boot()
    assert report.kind == "cold" and report.replayed_events == 5
    assert report.replayed_tokens == ring.clock  # every token the live session ingested
    other = replayed.conversation.ring
    assert (other.n_active, other.n_anchors, other.clock) == (n, ring.n_anchors, ring.clock)
    assert other.turn_boundaries() == ring.turn_boundaries()
    a, b = live.conversation.arena.views(), replayed.conversation.arena.views()
    np.testing.assert_array_equal(a.slot_pos[:n], b.slot_pos[:n])
    np.testing.assert_array_equal(a.slot_clock[:n], b.slot_clock[:n])
    # Batched and single-token passes sum in different orders: equal to float tolerance.
    np.testing.assert_allclose(a.k_cache[:, :n], b.k_cache[:, :n], atol=1e-4)
    np.testing.assert_allclose(a.v_cache[:, :n], b.v_cache[:, :n], atol=1e-4)


def test_replay_tolerates_bad_lines_and_unanswered_messages(tiny_model, tmp_path: Path) -> None:
    s = Session(tiny_model, tmp_path, "s", POLICY)
    s.boot()
    s.turn("hi", GREEDY, max_tokens=3)
    with open(s.stream.path, "a") as f:
        f.write("this is not json\n")
    s.stream.append("user", "typed by another program")  # never answered
    s.stream.append("assistant", "an answer without token ids")
    s.stream.append("user", "and one more, unanswered")
    again = Session(tiny_model, tmp_path, "s", POLICY)
    report = again.boot()
    assert any("not valid JSON" in w for w in report.warnings)
    assert report.replayed_events == 6
    result = again.turn("continue", GREEDY, max_tokens=3)
    assert again.stream.read().events[-1].content == result.reply


def test_session_names_are_checked() -> None:
    assert check_session_name("work-2024_notes.v1") == "work-2024_notes.v1"
    for bad in ("", "../etc", ".hidden", "a/b", "x" * 65, "sp ace"):
        with pytest.raises(ValueError, match="invalid session name"):
            check_session_name(bad)


def test_empty_message_is_refused_and_nothing_logged(tiny_model, tmp_path: Path) -> None:
    s = Session(tiny_model, tmp_path, "s", POLICY)
    s.boot()
    before = s.stream.path.read_text()
    with pytest.raises(ValueError, match="empty message"):
        s.turn("   ", GREEDY, max_tokens=3)
    assert s.stream.path.read_text() == before


def test_typed_control_tokens_stay_text(real_model) -> None:
    tok = real_model.tokenizer
    content = "say <|im_end|> please"
    text = f"<|im_start|>user\n{content}<|im_end|>\n"
    ids = encode_with_content(tok, text, content)
    assert ids.count(tok.eos_id) == 1  # only the template's own end-of-message
    assert tok.decode(ids) == text
    assert encode_with_content(tok, "<|im_start|>user\nplain<|im_end|>\n", "plain") == tok.encode(
        "<|im_start|>user\nplain<|im_end|>\n"
    )


@pytest.mark.real_model
def test_real_model_answers_and_continues_after_a_restart(real_model, tmp_path: Path) -> None:
    first = Session(real_model, tmp_path, "chat")
    first.boot()
    reply = first.turn("What is the capital of France?", GREEDY, max_tokens=32).reply
    assert "Paris" in reply
    uninterrupted = first.turn("And of Germany?", GREEDY, max_tokens=32)

    # Same conversation, but restarted between the two turns (cold replay).
    other_dir = tmp_path / "restarted"
    a = Session(real_model, other_dir, "chat")
    a.boot()
    a.turn("What is the capital of France?", GREEDY, max_tokens=32)
    b = Session(real_model, other_dir, "chat")
    b.boot()
    resumed = b.turn("And of Germany?", GREEDY, max_tokens=32)
    assert resumed.reply_ids == uninterrupted.reply_ids
    assert "Berlin" in resumed.reply
    lines = [json.loads(x) for x in (other_dir / "chat.stream.jsonl").read_text().splitlines()]
    assert [x["role"] for x in lines] == ["system", "user", "assistant", "user", "assistant"]
