"""Issue 31, defect 1: one writer per session. Whoever opens a session holds its OS lock
(engine/session/owner.py) until it closes it or dies; a second opener (an engine, `channel
chat`) is refused in one line naming the holder's pid; `channel send` still adds to a held
session; and the snapshot's anchor never moves back to an event picked up late."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import SessionBusyError, UnusableFileError
from engine.session.owner import acquire_session
from engine.session.session import Session
from engine.session.stream import StreamLog
from engine.state.ring_policy import RingPolicy
from engine.state.sampler import SamplingSettings

REPO = Path(__file__).resolve().parent.parent
POLICY = RingPolicy().scaled_to(256)


def busy_message(session: str, pid: int) -> str:
    return f"session {session!r} is open in another Channel (pid {pid})"


def test_a_second_engine_is_refused_until_the_first_closes_or_is_killed(engine, tmp_path):
    first, second = engine(), engine()
    assert first.request({"type": "open", "session": "s"}, "booted")["type"] == "booted"
    refused = second.request({"type": "open", "session": "s"}, "booted")
    assert refused["type"] == "error" and refused["code"] == "session_busy"
    assert refused["message"] == busy_message("s", first.proc.pid)
    assert refused["session"] == "s"
    # Refused, it holds nothing: the session is not open there, and other sessions are fine.
    assert second.request({"type": "hello"}, "hello")["sessions"] == []
    assert second.request({"type": "open", "session": "t"}, "booted")["type"] == "booted"
    # `close` gives the session back.
    assert first.request({"type": "close", "session": "s"}, "closed")["type"] == "closed"
    assert second.request({"type": "open", "session": "s"}, "booted")["type"] == "booted"
    refused = first.request({"type": "open", "session": "s"}, "booted")
    assert refused["message"] == busy_message("s", second.proc.pid)
    # A killed holder leaves no stale lock: the kernel released it.
    os.kill(second.proc.pid, signal.SIGKILL)
    second.proc.wait(10)
    booted = first.request({"type": "open", "session": "s"}, "booted")
    assert booted["type"] == "booted", booted
    lock = tmp_path / "data" / "s.lock"
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600
    assert lock.read_text().strip() == str(first.proc.pid)


def channel(data: Path, cache: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "channel_cli.cli", *argv, "--data-dir",
                           str(data), "--cache-dir", str(cache)],
                          capture_output=True, text=True, cwd=REPO, timeout=180)


def test_chat_on_a_held_session_is_one_line_and_send_still_adds_to_it(engine, tmp_path,
                                                                      tiny_gguf, tiny_cache):
    data = tmp_path / "data"
    holder = engine(data_dir=data)
    holder.request({"type": "open", "session": "s"}, "booted")
    chat = channel(data, tiny_cache, "chat", "--session", "s", "--model", str(tiny_gguf),
                   "--max-tokens", "4", "a second writer")
    assert chat.returncode == 2 and chat.stdout == ""
    assert chat.stderr.splitlines() == [
        f"channel: error: {busy_message('s', holder.proc.pid)}; use channel send to add to it"]
    assert "a second writer" not in (data / "s.stream.jsonl").read_text()
    sent = channel(data, tiny_cache, "send", "--session", "s", "--timeout", "60",
                   "sent beside the holder")
    assert sent.returncode == 0, sent.stderr
    answer = holder.wait_for(lambda e: e.get("type") == "end_of_turn" and e.get("req") is None)
    assert sent.stdout.strip() == answer["reply"].strip()
    # Closed, the session is chat's to take: the lock went with the holder's close.
    holder.request({"type": "close", "session": "s"}, "closed")
    chat = channel(data, tiny_cache, "chat", "--session", "s", "--model", str(tiny_gguf),
                   "--max-tokens", "4", "now mine")
    assert chat.returncode == 0, chat.stderr


def test_session_open_holds_the_lock_until_close(tiny_model, tmp_path) -> None:
    first = Session(tiny_model, tmp_path, "s", POLICY)
    first.open()
    second = Session(tiny_model, tmp_path, "s", POLICY)
    with pytest.raises(SessionBusyError) as refused:
        second.open()
    assert str(refused.value) == busy_message("s", os.getpid())
    assert refused.value.pid == os.getpid() and second.owner is None
    first.close()
    first.close()  # twice: nothing more to give back
    second.open()
    assert (tmp_path / "s.lock").exists()
    second.close()
    assert (tmp_path / "s.lock").exists()  # never deleted: that would race with an opener
    with acquire_session(tmp_path, "s") as lock:
        assert lock.held
    assert not lock.held


def test_a_link_planted_at_the_lock_is_refused_not_followed(tmp_path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (tmp_path / "s.lock").symlink_to(target)
    with pytest.raises(UnusableFileError, match="s.lock is a symbolic link"):
        acquire_session(tmp_path, "s")
    assert target.read_text() == "keep"


def test_an_event_picked_up_late_never_moves_the_anchor_back(tiny_model, tmp_path) -> None:
    """Another program's line, appended before our own latest, was taken in after it and
    became the anchor: the next warm boot fed our later events a second time."""
    session = Session(tiny_model, tmp_path, "s", POLICY)
    session.open()
    seen = session.stream_offset
    late = StreamLog(session.stream.path).append("assistant", "appended by another program")
    session.turn("hello there", SamplingSettings(), max_tokens=6)
    ours = session.last_event_id
    read = session.stream.read(seen)  # as the engine's watcher takes other programs' lines
    assert [e.id for e in read.events if e.id not in session.stream.own_ids] == [late.id]
    session.ingest_event(late)
    assert session.last_event_id == ours
    clock = session.conversation.ring.clock
    session.save(wait=True)
    session.close()
    warm = Session(tiny_model, tmp_path, "s", POLICY)
    report = warm.boot()
    assert report.kind == "warm" and report.replayed_events == 0
    assert warm.conversation.ring.clock == clock


def test_a_fork_never_writes_into_a_session_someone_holds(tiny_model, tmp_path) -> None:
    """A session opened before its first line has no files yet, so only its lock says it is
    taken: a fork onto that name is refused, and writes nothing."""
    from engine.session.fork import fork_session

    source = Session(tiny_model, tmp_path, "src", POLICY)
    source.boot()
    source.turn("something to fork", SamplingSettings(), max_tokens=3)
    with acquire_session(tmp_path, "new"):
        with pytest.raises(SessionBusyError) as refused:
            fork_session(tmp_path, "src", "new")
        assert str(refused.value) == busy_message("new", os.getpid())
        assert not (tmp_path / "new.stream.jsonl").exists()
    report = fork_session(tmp_path, "src", "new")  # once released, the fork goes ahead
    assert report.events == len(source.stream.read().events)
