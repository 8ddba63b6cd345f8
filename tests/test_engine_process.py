"""The engine child process, driven over its stdin/stdout protocol (real subprocesses)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.process.client import EngineProcess, spawn
from engine.snapshot.restore import read_snapshot

REPO = Path(__file__).resolve().parent.parent


def turn(proc: EngineProcess, session: str, text: str, **kw) -> dict:
    return proc.request({"type": "turn", "session": session, "text": text, "max_tokens": 8,
                         **kw}, "end_of_turn")


def test_protocol_round_trip(engine, tmp_path) -> None:
    e = engine()
    hello = e.request({"type": "hello"}, "hello")
    assert hello["protocol"] == 1 and hello["model"] == "tiny-test-llama"
    booted = e.request({"type": "open", "session": "s"}, "booted")
    assert booted["kind"] == "cold" and booted["reason"] == "no snapshot"
    assert [m["role"] for m in booted["transcript"]] == ["system"]
    ring = e.wait_for("ring")
    assert ring["anchors"] == ring["active"] > 0 and len(ring["cells"]) == ring["capacity"]
    assert booted["ring_slots"] == ring["capacity"] <= booted["context_length"]
    assert booted["kv_bytes"] > 0
    request_id = e.send({"type": "turn", "session": "s", "text": "hello", "max_tokens": 6})
    started = e.wait_for("turn_started")
    end = e.wait_for("end_of_turn")
    tokens = [ev for ev in e.log if ev.get("type") == "token" and ev.get("req") == request_id]
    assert started["req"] == end["req"] == request_id
    assert "".join(t["text"] for t in tokens) == end["reply"]
    assert end["decode_tokens"] <= 6 and end["stop"] in ("eot", "max_tokens")
    assert e.wait_for("snapshot")["status"] == "pending"
    saved = e.request({"type": "save", "session": "s"}, "snapshot")
    assert saved["status"] == "saved" and saved["bytes"] > 0
    assert e.request({"type": "save", "session": "s"}, "snapshot")["status"] == "exists"
    restored = e.request({"type": "restore", "session": "s"}, "restored")
    assert restored["kind"] == "warm" and restored["restored_slots"] == end["clock"]
    stats = e.request({"type": "stats"}, "stats")
    assert stats["sessions"]["s"]["ring"]["clock"] == end["clock"]
    assert stats["sessions"]["s"]["snapshot"]["state"] == "exists"
    assert e.request({"type": "close", "session": "s"}, "closed")["session"] == "s"
    e.send({"type": "shutdown"})
    assert e.wait_for("bye")["reason"] == "shutdown requested"
    assert e.close() == 0


def test_malformed_input_gets_errors_and_the_engine_keeps_serving(engine) -> None:
    e = engine()
    bad_lines = [
        "this is not json", "[1, 2]", '{"type": 7}', '{"type": "dance"}',
        '{"type": "turn", "session": "s"}', '{"type": "open", "session": 5}',
        '{"type": "open", "session": "s", "colour": "red"}', '{"id": {"x": 1}, "type": "hello"}',
        '{"type": "turn", "session": "nope", "text": "hi"}', '{"type": "open", "session": "../x"}',
        '{"type": "turn", "session": "s", "text": "hi", "temperature": -1}',
        "x" * (1 << 21),
    ]
    for line in bad_lines[:-2]:
        e.send(line)
    e.request({"type": "open", "session": "s"}, "booted")
    for line in bad_lines[-2:]:
        e.send(line)
    e.request({"type": "hello"}, "hello")  # requests are answered in order: a sync point
    errors = [ev for ev in e.log if ev.get("type") == "error"]
    assert len(errors) == len(bad_lines)
    assert all(err["message"] and "\n" not in err["message"] for err in errors)
    messages = " | ".join(err["message"] for err in errors)
    for expected in ("not valid JSON", "must be a JSON object", "missing 'type'",
                     "unknown request type 'dance'", "missing field 'text'",
                     "field 'session' must be str", "unknown field 'colour'",
                     "'id' must be a string", "is not open", "invalid session name",
                     "temperature must be", "longer than"):
        assert expected in messages, expected
    assert turn(e, "s", "still fine?")["type"] == "end_of_turn"


def test_debounce_fires_once_after_quiescence(engine) -> None:
    e = engine("--debounce-s", "1.0")
    e.request({"type": "open", "session": "s"}, "booted")
    turn(e, "s", "one")
    time.sleep(0.4)
    turn(e, "s", "two")  # activity inside the window re-arms the timer
    t_end = time.monotonic()
    saved = e.wait_for(lambda ev: ev.get("type") == "snapshot" and ev["status"] == "saved", 10)
    assert time.monotonic() - t_end >= 0.9
    time.sleep(2.0)
    statuses = [ev["status"] for ev in e.log if ev.get("type") == "snapshot"]
    assert statuses.count("saved") == 1 and statuses.count("saving") == 1, statuses
    assert saved["clock"] == e.request({"type": "stats"}, "stats")["sessions"]["s"]["ring"]["clock"]


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "stdin"])
def test_shutdown_during_generation_flushes_a_snapshot(engine, tmp_path, how) -> None:
    e = engine()
    e.request({"type": "open", "session": "s"}, "booted")
    e.send({"type": "turn", "session": "s", "text": "tell me everything", "max_tokens": 400})
    e.wait_for("token")
    if how == "stdin":
        e.proc.stdin.close()
    else:
        e.proc.send_signal(getattr(signal, how))
    end = e.wait_for("end_of_turn")
    assert end["stop"] == "cancelled"
    saved = e.wait_for("snapshot")
    assert saved["status"] == "saved"
    e.wait_for("bye")
    assert e.proc.wait(30) == 0
    snap = read_snapshot(tmp_path / "data" / "s.snapshot.bin")
    assert snap.header.clock == saved["clock"]
    snap.mapping.close()


def test_engine_exits_and_flushes_when_its_parent_dies(tmp_path, tiny_gguf, tiny_cache) -> None:
    data = tmp_path / "data"
    # An intermediate parent starts the engine, opens a session, runs a turn, then waits.
    script = f"""
import json, subprocess, sys, time
p = subprocess.Popen([sys.executable, "-m", "engine", "--data-dir", {str(data)!r},
    "--cache-dir", {str(tiny_cache)!r}, "--model", {str(tiny_gguf)!r}],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
for req in ({{"type": "open", "session": "s"}}, {{"type": "turn", "session": "s", "text": "x",
            "max_tokens": 4}}):
    p.stdin.write(json.dumps(req) + "\\n"); p.stdin.flush()
for line in p.stdout:
    if json.loads(line)["type"] == "end_of_turn":
        break
print(p.pid, flush=True)
time.sleep(600)
"""
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE,
                              text=True)
    engine_pid = int(parent.stdout.readline())
    parent.kill()  # SIGKILL: no chance to tell the engine anything
    parent.wait(10)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(engine_pid):
        time.sleep(0.1)
    assert not _alive(engine_pid), "the engine outlived its parent"
    snap = read_snapshot(data / "s.snapshot.bin")
    assert snap.header.clock > snap.header.num_anchors
    snap.mapping.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by init) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_cancel_at_every_phase_leaves_the_session_consistent(engine, tmp_path) -> None:
    e = engine()
    e.request({"type": "open", "session": "s"}, "booted")
    idle = e.request({"type": "cancel", "session": "s"}, "cancelling")
    assert idle["turn_active"] is False
    assert turn(e, "s", "a turn after an idle cancel")["stop"] in ("eot", "max_tokens")
    # During prefill: the prompt is ingested whole, then decoding stops at once.
    e.send({"type": "turn", "session": "s", "text": "long prompt " * 150, "max_tokens": 50})
    e.wait_for("turn_started")
    e.send({"type": "cancel", "session": "s"})
    early = e.wait_for("end_of_turn")
    assert early["stop"] == "cancelled" and early["decode_tokens"] <= 1
    # During decode.
    e.send({"type": "turn", "session": "s", "text": "go on", "max_tokens": 300})
    e.wait_for("token")
    e.send({"type": "cancel", "session": "s"})
    mid = e.wait_for("end_of_turn")
    assert mid["stop"] == "cancelled" and mid["decode_tokens"] < 300
    after = turn(e, "s", "and now?")
    assert after["stop"] in ("eot", "max_tokens")
    e.request({"type": "save", "session": "s"}, "snapshot")
    ring = e.request({"type": "stats", "session": "s"}, "stats")["sessions"]["s"]["ring"]
    e.send({"type": "shutdown"})
    e.wait_for("bye")
    e.close()
    # A new engine boots warm from that snapshot and matches the transcript exactly.
    again = engine()
    booted = again.request({"type": "open", "session": "s"}, "booted")
    assert booted["kind"] == "warm" and booted["replayed_events"] == 0
    assert booted["restored_slots"] == ring["active"]
    assert again.wait_for("ring")["clock"] == after["clock"] == ring["clock"]
    roles = [m["role"] for m in booted["transcript"]]
    assert roles == ["system"] + ["user", "assistant"] * 4
    assert booted["transcript"][4]["stop"] == "cancelled"
    assert turn(again, "s", "still consistent?")["stop"] in ("eot", "max_tokens")


def test_external_appends_are_answered_and_own_appends_are_not(engine, tmp_path) -> None:
    data = tmp_path / "data"
    e = engine(data_dir=data)
    e.request({"type": "open", "session": "s"}, "booted")
    turn(e, "s", "typed in the app")
    channel = Path(sys.executable).parent / "channel"
    sent = subprocess.run(
        [str(channel), "send", "--data-dir", str(data), "--session", "s", "--timeout", "60",
         "sent from a script"], capture_output=True, text=True, timeout=90,
    )
    assert sent.returncode == 0, sent.stderr
    external = [ev for ev in e.log if ev.get("type") == "stream_event"]
    assert [ev["content"] for ev in external] == ["sent from a script"]
    answer = e.wait_for(lambda ev: ev.get("type") == "end_of_turn" and ev.get("req") is None)
    assert sent.stdout.strip() == answer["reply"].strip()
    lines = [json.loads(x) for x in (data / "s.stream.jsonl").read_text().splitlines()]
    assert [x["role"] for x in lines] == ["system", "user", "assistant", "user", "assistant"]
    time.sleep(1.0)  # give the watcher time to (wrongly) report the engine's own appends
    assert len([ev for ev in e.log if ev.get("type") == "stream_event"]) == 1


def test_send_without_an_engine_keeps_the_message(tmp_path) -> None:
    channel = Path(sys.executable).parent / "channel"
    out = subprocess.run([str(channel), "send", "--data-dir", str(tmp_path), "--session", "s",
                          "--timeout", "0.5", "hello?"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 3 and "answered when session 's' is next opened" in out.stderr
    record = json.loads((tmp_path / "s.stream.jsonl").read_text())
    assert record["role"] == "user" and record["content"] == "hello?"


def test_two_sessions_in_one_engine(engine) -> None:
    e = engine()
    e.request({"type": "open", "session": "a"}, "booted")
    e.request({"type": "open", "session": "b"}, "booted")
    ta = turn(e, "a", "first conversation")
    tb = turn(e, "b", "second conversation, different words entirely")
    ta2 = turn(e, "a", "more of the first")
    stats = e.request({"type": "stats"}, "stats")["sessions"]
    assert set(stats) == {"a", "b"}
    assert stats["a"]["ring"]["clock"] == ta2["clock"] > ta["clock"]
    assert stats["b"]["ring"]["clock"] == tb["clock"]
    assert e.request({"type": "hello"}, "hello")["sessions"] == ["a", "b"]


@pytest.mark.real_model
def test_real_model_through_the_engine(tmp_path, real_model_path) -> None:
    from .conftest import SHARED_CACHE

    e = spawn(tmp_path, SHARED_CACHE, real_model_path)
    try:
        e.wait_for("ready", timeout=120)
        e.request({"type": "open", "session": "s"}, "booted")
        end = e.request({"type": "turn", "session": "s",
                         "text": "What is the capital of Japan?", "max_tokens": 24,
                         "temperature": 0},  # greedy: the model's own first choice
                        "end_of_turn", timeout=300)
        # The default backend (ggml on a CPU); Japan rather than France: see test_tui_e2e.py.
        assert "Tokyo" in end["reply"]
    finally:
        e.send({"type": "shutdown"})
        e.close()


def test_boot_compare_times_cold_and_warm(engine) -> None:
    e = engine()
    e.request({"type": "open", "session": "s"}, "booted")
    turn(e, "s", "something to replay")
    turn(e, "s", "and a little more")
    result = e.request({"type": "boot_compare", "session": "s"}, "boot_compare")
    # The cold boot said how far it got, under the request's id, up to the whole of it
    # (the conversation after the pinned system prompt).
    reports = [ev for ev in e.log if ev.get("type") == "replay_progress"
               and ev.get("req") == result["req"]]
    assert reports and 0 < reports[-1]["done"] == reports[-1]["total"] < result["cold_tokens"]
    assert result["warm_kind"] == "warm" and result["warm_slots"] > 0
    assert result["cold_events"] == 5 and result["cold_tokens"] == result["warm_slots"]
    assert result["cold_ms"] > 0 and result["warm_ms"] > 0
    assert result["ratio"] == pytest.approx(result["cold_ms"] / result["warm_ms"], rel=0.05)
    assert turn(e, "s", "the live session is untouched")["stop"] in ("eot", "max_tokens")


def test_session_files_and_log_are_private(engine, tmp_path) -> None:
    data = tmp_path / "data"
    e = engine(data_dir=data)
    e.request({"type": "open", "session": "s"}, "booted")
    turn(e, "s", "hi")
    e.request({"type": "save", "session": "s"}, "snapshot")
    assert oct(data.stat().st_mode & 0o777) == "0o700"
    for name in ("s.stream.jsonl", "s.snapshot.bin", "engine.log"):
        assert oct((data / name).stat().st_mode & 0o777) == "0o600", name


def test_an_unusable_data_directory_is_a_fatal_one_line_error(tmp_path, tiny_gguf, tiny_cache):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    e = spawn(not_a_dir, tiny_cache, tiny_gguf)
    error = e.wait_for("error", timeout=60)
    assert error["fatal"] and "is not a directory" in error["message"]
    assert e.proc.wait(30) == 2


def test_shutdown_during_a_long_cold_replay_does_not_wait_for_it(tmp_path) -> None:
    from ulid import ULID

    from engine.model.model import load_model
    from engine.session.stream import StreamEvent

    from .tiny_model import TinySpec, write_tiny_gguf

    # A replay feeds at most a ring's worth of tokens: a tiny model with a long context (and
    # so an 8192-slot ring) makes that take seconds.
    gguf = write_tiny_gguf(tmp_path / "long.gguf", TinySpec(context_length=8192))
    load_model(gguf, tmp_path / "cache")
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    lines = [StreamEvent(str(ULID()), "system", "You are a tiny test model.", "t").to_json()]
    for i in range(400):  # ~280k tokens, of which the ring takes the last 8k
        lines.append(StreamEvent(str(ULID()), "user",
                                 f"message {i} " + "the then and on an in there " * 40,
                                 "t").to_json())
        lines.append(StreamEvent(str(ULID()), "assistant", "er " * 40, "t").to_json())
    (data / "long.stream.jsonl").write_text("\n".join(lines) + "\n")
    e = spawn(data, tmp_path / "cache", gguf)
    try:
        e.wait_for("ready", timeout=60)
        e.send({"type": "open", "session": "long", "cold": True})
        e.wait_for("replay_progress", timeout=60)
        t0 = time.monotonic()
        e.send({"type": "shutdown"})
        error = e.wait_for("error", timeout=60)
        assert "abandoned" in error["message"]
        e.wait_for("bye", timeout=30)
        assert time.monotonic() - t0 < 20
        assert e.proc.wait(30) == 0
    finally:
        if e.proc.poll() is None:
            e.proc.kill()
    assert not (data / "long.snapshot.bin").exists()  # a half-replayed ring is never saved


def test_the_flags_a_client_writes_are_the_ones_the_engine_parses(tmp_path) -> None:
    """One definition of the engine's command line (engine/process/flags.py): what the TUI
    writes for each flag comes back as the same value from the engine's own parser."""
    from engine.__main__ import parse_args
    from engine.process.flags import ENGINE_FLAGS, engine_argv

    given = {"data_dir": tmp_path / "d", "cache_dir": tmp_path / "c", "model": tmp_path / "m",
             "backend": "numpy", "debounce_s": 0.25, "ring_slots": 512, "evict": "h2o",
             "max_message_bytes": 1000, "keep_turns": 12, "compact_share": 0.25}
    assert set(given) == set(ENGINE_FLAGS)
    parsed = vars(parse_args(engine_argv(**given)))
    assert {name: parsed[name] for name in given} == given
    assert parse_args([]).backend == "auto" and engine_argv(model=None) == []
