"""Undo, regenerate and fork on the REAL engine code (tiny random model): the ring rolls back
exactly, nothing is re-encoded, the stream only grows, and replay agrees with the live state."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.process.runtime import transcript_fields
from engine.session.fork import fork_session
from engine.session.model_record import read_record, session_model, write_record
from engine.session.session import Session
from engine.session.undo import undo
from engine.state.ring_policy import RingPolicy
from engine.state.sampler import SamplingSettings

from .rollback_checks import assert_same

GREEDY = SamplingSettings()
POLICY = RingPolicy().scaled_to(256)


def ring_state(session: Session) -> dict:
    """The live part of the ring: what a correct rollback must give back exactly."""
    conv = session.conversation
    v, n = conv.arena.views(), conv.ring.n_active
    return {"counters": v.ring_counters.copy(), "k": v.k_cache[:, :n].copy(),
            "v": v.v_cache[:, :n].copy(), "pos": v.slot_pos[:n].copy(),
            "clock": v.slot_clock[:n].copy(), "salience": v.slot_salience[:n].copy(),
            "rendered": session.transcript.rendered}


def test_undo_rolls_the_ring_back_exactly_and_replay_agrees(tiny_model, tmp_path) -> None:
    session = Session(tiny_model, tmp_path, "s", POLICY)
    session.boot()
    session.turn("first message", GREEDY, max_tokens=5)
    after_first = ring_state(session)
    session.turn("second message", GREEDY, max_tokens=5)
    lines_before = session.stream.path.read_bytes()

    report, pending = undo(session)
    assert pending is None and report.method == "rollback" and report.dropped_slots > 0
    assert_same(ring_state(session), after_first)
    data = session.stream.path.read_bytes()
    assert data.startswith(lines_before)  # appended, never rewritten
    shown = [m for m in transcript_fields(session) if not m["hidden"]]
    assert [m["content"] for m in shown if m["role"] == "user"] == ["first message"]

    # A cold replay of the edited stream builds the same ring as the rolled-back one.
    fresh = Session(tiny_model, tmp_path, "s", POLICY)
    assert fresh.boot(cold=True).kind == "cold"
    live, replayed = ring_state(session), ring_state(fresh)
    np.testing.assert_array_equal(live["clock"], replayed["clock"])
    np.testing.assert_allclose(live["k"], replayed["k"], atol=1e-4)
    assert live["rendered"] == replayed["rendered"]


def test_regenerate_decodes_again_from_the_kept_logits(tiny_model, tmp_path) -> None:
    session = Session(tiny_model, tmp_path, "s", POLICY)
    session.boot()
    first = session.turn("tell me something", GREEDY, max_tokens=6)
    after = ring_state(session)
    report, pending = undo(session, keep_user=True)
    assert report.method == "rollback" and pending is not None and pending.prefilled
    again = session.respond(pending, GREEDY, 6)
    assert again.prompt_tokens == 0  # nothing re-encoded
    assert again.reply_ids == first.reply_ids  # greedy: the same reply from the same logits
    state = ring_state(session)
    np.testing.assert_array_equal(state["k"], after["k"])
    assert state["rendered"] == after["rendered"]
    events = session.stream.read().events
    assert [e.role for e in events] == ["system", "user", "assistant", "assistant", "assistant"]
    assert events[3].extra["retracts"] == [events[2].id]
    # Warm boot from a snapshot saved after the regenerate: the snapshot follows the edit.
    assert session.save().error is None
    warm = Session(tiny_model, tmp_path, "s", POLICY)
    assert warm.boot().kind == "warm"
    assert warm.transcript.rendered == session.transcript.rendered


def test_undo_after_an_eviction_replays_and_says_why(tiny_model, tmp_path) -> None:
    small = RingPolicy(max_slots=64, recent_window=8, evict_batch=4, prefill_chunk=16)
    session = Session(tiny_model, tmp_path, "s", small)
    session.boot()
    session.turn("a short one", GREEDY, max_tokens=4)
    session.turn("word " * 30, GREEDY, max_tokens=4)  # overflows the ring: evicts
    assert session.conversation.ring.evicted > 0
    report, _ = undo(session)
    assert report.method == "replay" and "evicted" in report.reason
    shown = [m["content"] for m in transcript_fields(session) if not m["hidden"]]
    assert shown[-1] != "" and "word" not in shown[-2]


def test_undo_with_nothing_to_undo_is_one_clear_error(tiny_model, tmp_path) -> None:
    session = Session(tiny_model, tmp_path, "s", POLICY)
    session.boot()
    with pytest.raises(ValueError, match="nothing to undo"):
        undo(session)


def test_fork_boots_warm_and_both_go_on_independently(tiny_model, tmp_path) -> None:
    source = Session(tiny_model, tmp_path, "src", POLICY)
    source.boot()
    source.turn("shared history", GREEDY, max_tokens=5)
    source.save()
    report = fork_session(tmp_path, "src", "copy")
    assert report.events == 3 and report.snapshot_bytes > 0
    first = (tmp_path / "copy.stream.jsonl").read_text().splitlines()[0]
    assert '"forked_from"' in first and '"src"' in first
    fork = Session(tiny_model, tmp_path, "copy", POLICY)
    boot = fork.boot()
    assert boot.kind == "warm" and boot.replayed_events == 0
    assert fork.transcript.rendered == source.transcript.rendered
    fork.turn("only in the fork", GREEDY, max_tokens=3)
    source.turn("only in the source", GREEDY, max_tokens=3)
    assert "only in the fork" not in source.stream.path.read_text()
    assert "only in the source" not in fork.stream.path.read_text()
    with pytest.raises(ValueError, match="already exists"):
        fork_session(tmp_path, "src", "copy")


def test_issue31_defect5_a_fork_keeps_the_source_model_record(tiny_model, tmp_path) -> None:
    """A fork of a session on another model must open on that model, not the default."""
    source = Session(tiny_model, tmp_path, "src", POLICY)
    source.boot()
    source.turn("hello", GREEDY, max_tokens=3)
    write_record(tmp_path, "src", tiny_model.path, tiny_model.fingerprint, "tiny")
    fork_session(tmp_path, "src", "copy")
    assert read_record(tmp_path, "copy") == read_record(tmp_path, "src")
    assert session_model(tmp_path, "copy") is not None  # checked against the file, too
    # A record left behind by a session of that name counts as the session existing.
    (tmp_path / "copy.stream.jsonl").unlink()
    (tmp_path / "copy.snapshot.bin").unlink(missing_ok=True)
    with pytest.raises(ValueError, match="already exists"):
        fork_session(tmp_path, "src", "copy")


def test_a_fork_takes_the_source_reply_settings_along(tiny_model, tmp_path) -> None:
    """The front end's `<session>.settings.json` (issue 29) goes with a fork; a source
    without one gives a fork without one, and a settings file left under the new name by a
    session never used does not count as that session existing."""
    source = Session(tiny_model, tmp_path, "src", POLICY)
    source.boot()
    source.turn("hello", GREEDY, max_tokens=3)
    settings = tmp_path / "src.settings.json"
    settings.write_text('{"temperature": 0.7}\n')
    (tmp_path / "copy.settings.json").write_text('{"top_p": 0.5}\n')  # never used
    fork_session(tmp_path, "src", "copy")
    assert (tmp_path / "copy.settings.json").read_text() == settings.read_text()
    settings.unlink()
    fork_session(tmp_path, "src", "bare")
    assert not (tmp_path / "bare.settings.json").exists()


def test_engine_undo_regenerate_and_fork_requests(engine, tmp_path) -> None:
    e = engine()
    e.request({"type": "open", "session": "s"}, "booted")
    e.request({"type": "turn", "session": "s", "text": "hello", "max_tokens": 4},
              "end_of_turn")
    again = e.send({"type": "regenerate", "session": "s", "max_tokens": 4})
    undone = e.wait_for(lambda ev: ev.get("req") == again and ev["type"] in ("undone", "error"))
    assert undone["type"] == "undone" and undone["method"] == "rollback"
    end = e.wait_for(lambda ev: ev.get("req") == again and ev["type"] == "end_of_turn")
    assert end["prompt_tokens"] == 0
    gone = e.request({"type": "undo", "session": "s"}, "undone")
    assert [m["role"] for m in gone["transcript"] if not m["hidden"]] == ["system"]
    saved = e.wait_for(lambda ev: ev.get("req") == gone["req"] and ev["type"] == "snapshot"
                       and ev["status"] != "saving")
    assert saved["status"] == "saved"  # the snapshot follows the undo
    e.request({"type": "turn", "session": "s", "text": "again", "max_tokens": 4}, "end_of_turn")
    forked = e.request({"type": "fork", "session": "s", "new": "t"}, "forked")
    assert forked["events"] >= 4 and forked["snapshot_bytes"] > 0
    booted = e.request({"type": "open", "session": "t"}, "booted")
    assert booted["kind"] == "warm" and booted["replayed_events"] == 0
    err = e.request({"type": "fork", "session": "s", "new": "t"}, "forked")
    assert err["type"] == "error" and "already exists" in err["message"]


def test_cli_fork(tmp_path, tiny_model) -> None:
    data = tmp_path / "data"
    session = Session(tiny_model, data, "a", POLICY)
    session.boot()
    session.turn("hi", GREEDY, max_tokens=3)
    channel = Path(sys.executable).parent / "channel"
    ok = subprocess.run([str(channel), "fork", "a", "b", "--data-dir", str(data)],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert "forked 'a' as 'b'" in ok.stdout
    again = subprocess.run([str(channel), "fork", "a", "b", "--data-dir", str(data)],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 2
    assert again.stderr.strip() == "channel: error: session 'b' already exists"
