"""Regression tests for issue 12: eight ways one bad line or request broke the engine.

Each test reproduces its defect from a clean data directory through a live engine process
(or, for the writer, a real Snapshotter) and checks the fixed behaviour.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ulid import ULID

from engine.errors import StreamError
from engine.session.stream import StreamEvent, StreamLog
from engine.snapshot.restore import read_snapshot

from .test_engine_process import turn


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x]


def _stream_line(role: str, content: str, event_id: str | None = None) -> str:
    return StreamEvent(event_id or str(ULID()), role, content, "t").to_json()


def _still_serving(e) -> dict:
    return e.request({"type": "stats"}, "stats", timeout=30)


def test_defect1_a_bad_seed_is_refused_before_anything_is_logged(engine, tmp_path) -> None:
    data = tmp_path / "data"
    e = engine()
    e.request({"type": "open", "session": "s"}, "booted")
    bad = e.request({"type": "turn", "session": "s", "text": "hi", "seed": -1}, "end_of_turn")
    assert bad["type"] == "error" and "seed must be" in bad["message"], bad
    assert [x["role"] for x in _lines(data / "s.stream.jsonl")] == ["system"]
    assert turn(e, "s", "and now a good one")["type"] == "end_of_turn"
    e.send({"type": "shutdown"})
    e.wait_for("bye")
    again = engine()
    again.request({"type": "open", "session": "s"}, "booted")
    assert turn(again, "s", "after a restart")["type"] == "end_of_turn"


def test_defect2_a_lone_surrogate_in_a_stream_line_is_skipped(engine, tmp_path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    lines = [_stream_line("system", "You are a tiny test model."),
             _stream_line("user", "fine"), _stream_line("assistant", "ok"),
             json.dumps({"id": str(ULID()), "role": "user", "content": "bad \ud800 line",
                         "ts": "t"})]  # json.dumps escapes it as \ud800: valid JSON
    (data / "s.stream.jsonl").write_text("\n".join(lines) + "\n")
    e = engine()
    for cold in (True, False):
        booted = e.request({"type": "open", "session": "s", "cold": cold}, "booted")
        assert booted["type"] == "booted", booted
        assert any("line 4" in w and "surrogate" in w for w in booted["warnings"])
        e.request({"type": "close", "session": "s"}, "closed")
    e.request({"type": "open", "session": "s"}, "booted")
    with open(data / "s.stream.jsonl", "a") as f:  # the same line arriving live
        f.write(lines[-1] + "\n")
    warning = e.wait_for(lambda ev: ev.get("type") == "warning" and "surrogate" in
                         ev.get("message", ""), timeout=30)
    assert "line 5" in warning["message"]
    assert turn(e, "s", "still here")["type"] == "end_of_turn"


def test_defect3_a_lone_surrogate_in_the_session_field_is_an_error(engine) -> None:
    e = engine()
    e.send('{"type": "open", "session": "\\ud800", "id": 1}')
    error = e.wait_for("error", timeout=30)
    assert error["req"] == 1 and "surrogate" in error["message"]
    e.send('{"type": "open", "session": "s", "id": "\\udfff"}')  # a bad id is not echoed
    error = e.wait_for("error", timeout=30)
    assert "req" not in error and "surrogate" in error["message"]
    assert _still_serving(e)["type"] == "stats"
    assert e.proc.poll() is None


def test_defect4_the_reader_survives_any_line_and_exits_at_end_of_input(engine) -> None:
    e = engine()
    raw = e.proc.stdin.buffer
    e.proc.stdin.flush()
    raw.write(b"[" * 100_000 + b"]" * 100_000 + b"\n")  # 200 KB of nesting
    raw.write(b'{"type": "hello", "client": "\xff\xfe"}\n')  # invalid UTF-8
    raw.flush()
    errors = [e.wait_for("error", timeout=30) for _ in range(2)]
    assert "nested too deeply" in errors[0]["message"]
    assert "not valid UTF-8" in errors[1]["message"]
    assert _still_serving(e)["type"] == "stats"
    e.proc.stdin.close()
    assert e.wait_for("bye", timeout=30)["reason"] == "stdin closed"
    assert e.proc.wait(30) == 0


def test_defect5_huge_prompts_are_capped_cancellable_and_never_fully_replayed(
        engine, tmp_path) -> None:
    data = tmp_path / "data"
    e = engine()
    e.request({"type": "open", "session": "s"}, "booted")
    turn(e, "s", "hello")
    big = e.request({"type": "turn", "session": "s", "text": "x" * 100_000}, "end_of_turn")
    assert big["type"] == "error" and "65536" in big["message"]
    assert "--max-message-bytes" in big["message"]
    before = _still_serving(e)["sessions"]["s"]["ring"]["clock"]
    # Just under the cap: tens of thousands of the tiny model's tokens, hundreds of chunks.
    long_id = e.send({"type": "turn", "session": "s", "text": "the then " * 7000})
    started = e.wait_for("turn_started", timeout=30)
    assert started["req"] == long_id and started["user_event_id"]
    e.send({"type": "cancel", "session": "s"})
    end = e.wait_for("end_of_turn", timeout=30)
    assert end["stop"] == "cancelled" and end["decode_tokens"] == 0
    stats = _still_serving(e)["sessions"]["s"]
    assert stats["ring"]["clock"] == before  # the cut-off message was rolled back
    assert turn(e, "s", "after the cancel")["stop"] in ("eot", "max_tokens")
    e.send({"type": "shutdown"})
    e.wait_for("bye")
    # A huge message in the stream (say a crash mid-prefill) replays only a ring's worth.
    with open(data / "s.stream.jsonl", "a") as f:
        f.write(_stream_line("user", "the then " * 30_000) + "\n")
        f.write(_stream_line("assistant", "ok") + "\n")
    again = engine()
    booted = again.request({"type": "open", "session": "s", "cold": True}, "booted")
    ring = again.wait_for("ring")
    assert booted["kind"] == "cold"
    assert booted["replayed_tokens"] <= ring["capacity"]
    assert turn(again, "s", "works")["type"] == "end_of_turn"


def test_a_shutdown_during_a_long_prefill_keeps_the_message_for_the_next_open(engine) -> None:
    e = engine()
    e.request({"type": "open", "session": "s"}, "booted")
    turn(e, "s", "hello")
    e.send({"type": "turn", "session": "s", "text": "the then " * 7000})
    message = e.wait_for("turn_started", timeout=30)["user_event_id"]
    e.send({"type": "shutdown"})
    assert e.wait_for("end_of_turn", timeout=30)["stop"] == "cancelled"
    flushed = e.wait_for("snapshot", timeout=30)  # the half-fed state is not saved
    assert flushed["status"] == "failed" and "not saved" in flushed["error"]
    e.wait_for("bye", timeout=30)
    assert e.proc.wait(30) == 0
    again = engine()
    open_id = again.send({"type": "open", "session": "s"})
    booted = again.wait_for("booted", timeout=60)
    assert booted["kind"] == "warm" and booted["transcript"][-1]["id"] == message
    answer = again.wait_for("turn_started", timeout=60)  # answered, as after a crash
    assert answer["req"] == open_id and answer["user_event_id"] == message


def test_defect6_an_unusable_snapshot_path_means_a_cold_boot_with_a_reason(
        engine, tmp_path) -> None:
    data = tmp_path / "data"
    e = engine()
    e.request({"type": "open", "session": "d"}, "booted")
    turn(e, "d", "hi")
    e.request({"type": "close", "session": "d"}, "closed")
    (data / "d.snapshot.bin").unlink()
    (data / "d.snapshot.bin").mkdir()
    os.mkfifo(data / "f.snapshot.bin")  # opening a FIFO to read it would block forever
    for name, kind in (("d", "directory"), ("f", "FIFO")):
        booted = e.request({"type": "open", "session": name}, "booted", timeout=30)
        assert booted["type"] == "booted", booted
        assert booted["kind"] == "cold" and kind in booted["reason"], booted["reason"]
        assert "kept as" in booted["reason"]
        saved = e.request({"type": "save", "session": name}, "snapshot")
        assert saved["status"] == "saved"
        read_snapshot(data / f"{name}.snapshot.bin").mapping.close()


def test_defect7_a_reused_anchor_id_refuses_the_warm_boot(engine, tmp_path) -> None:
    data = tmp_path / "data"
    e = engine()
    e.request({"type": "open", "session": "s"}, "booted")
    for text in ("one", "two", "three"):
        end = turn(e, "s", text)
    e.request({"type": "close", "session": "s"}, "closed")
    anchor = end["event_id"]
    with open(data / "s.stream.jsonl", "a") as f:
        f.write(_stream_line("user", "four") + "\n")
        f.write(_stream_line("assistant", "four back") + "\n")
        f.write(_stream_line("assistant", "reusing the anchor's id", anchor) + "\n")
    booted = e.request({"type": "open", "session": "s"}, "booted")
    warm_ring = e.wait_for("ring")
    assert booted["kind"] == "cold", booted
    assert "duplicate" in booted["reason"] and "line 10" in booted["reason"]
    assert any("line 10" in w and "duplicate" in w for w in booted["warnings"])
    e.request({"type": "close", "session": "s"}, "closed")
    cold = e.request({"type": "open", "session": "s", "cold": True}, "booted")
    assert cold["replayed_events"] == booted["replayed_events"] == 10
    assert e.wait_for("ring")["clock"] == warm_ring["clock"]


def test_defect8_no_file_of_a_session_is_opened_through_a_symlink(engine, tmp_path) -> None:
    data, outside = tmp_path / "data", tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text("precious")
    e = engine()
    e.request({"type": "open", "session": "s"}, "booted")
    turn(e, "s", "hi")
    (data / "s.snapshot.bin.tmp").symlink_to(victim)
    saved = e.request({"type": "save", "session": "s"}, "snapshot")
    assert saved["status"] == "saved", saved
    assert victim.read_text() == "precious"
    assert not (data / "s.snapshot.bin").is_symlink()
    (data / "l.stream.jsonl").symlink_to(victim)
    refused = e.request({"type": "open", "session": "l"}, "booted")
    assert refused["type"] == "error" and "symbolic link" in refused["message"]
    assert victim.read_text() == "precious"


# -- the minor items ---------------------------------------------------------------------------

def test_max_tokens_zero_decodes_nothing(engine) -> None:
    e = engine()
    e.request({"type": "open", "session": "s"}, "booted")
    end = turn(e, "s", "just take this in", max_tokens=0)
    assert end["decode_tokens"] == 0 and end["stop"] == "max_tokens"


def test_the_request_line_limit_counts_bytes(engine) -> None:
    e = engine()
    e.send(json.dumps({"type": "hello", "client": "é" * 600_000}, ensure_ascii=False))
    error = e.wait_for("error", timeout=30)  # 600k characters, 1.2 MB
    assert "longer than 1048576 bytes" in error["message"]
    assert _still_serving(e)["type"] == "stats"


def test_a_shared_data_directory_is_made_private_and_said_so(engine, tmp_path) -> None:
    data = tmp_path / "shared"
    data.mkdir()
    data.chmod(0o755)
    e = engine(data_dir=data)
    assert oct(data.stat().st_mode & 0o777) == "0o700"
    warnings = [ev["message"] for ev in e.log if ev.get("type") == "warning"]
    assert any("0755" in w and "0700" in w for w in warnings), warnings


def test_a_stale_snapshot_tmp_is_removed_at_open(engine, tmp_path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "s.snapshot.bin.tmp").write_bytes(b"\0" * 4096)  # what a crash mid-save leaves
    e = engine()
    booted = e.request({"type": "open", "session": "s"}, "booted")
    assert not (data / "s.snapshot.bin.tmp").exists()
    assert any("s.snapshot.bin.tmp" in w for w in booted["warnings"])


def test_the_stream_never_writes_a_line_its_reader_would_refuse(tmp_path) -> None:
    log = StreamLog(tmp_path / "s.stream.jsonl")
    log.append("user", "kept")
    before = log.path.read_bytes()
    with pytest.raises(StreamError, match="surrogate"):
        log.append("user", "bad \ud800")
    assert log.path.read_bytes() == before
