"""The saved state is the state a cold replay of the stream builds (issue 31, defects 2, 3
and 4), and `channel snapshot verify` says whether it is."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.model.model import Model, load_model
from engine.process.client import spawn
from engine.session.replay import ring_order, taken_in, withdrawn_ids
from engine.session.session import Session
from engine.session.stream import StreamEvent, StreamLog
from engine.session.verify import verify_session
from engine.state.ring_policy import RingPolicy
from engine.state.sampler import SamplingSettings

from .tiny_model import TinySpec, write_tiny_gguf

GREEDY = SamplingSettings()
POLICY = RingPolicy().scaled_to(1024)
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def long_files(tmp_path_factory) -> tuple[Path, Path]:
    """The tiny model with room for a dozen turns before the ring evicts (so that verify
    compares slot by slot), and its weight cache."""
    directory = tmp_path_factory.mktemp("long-context")
    gguf = write_tiny_gguf(directory / "long.gguf", TinySpec(context_length=1024, seed=3))
    return gguf, directory / "cache"


@pytest.fixture(scope="module")
def long_model(long_files) -> Model:
    return load_model(*long_files)


def channel(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "channel_cli.cli", *argv],
                          capture_output=True, text=True, cwd=REPO, timeout=300)


def test_defect2_a_message_left_waiting_is_fed_once(long_model, tmp_path) -> None:
    """After enough turns the transcript renders through a window (transcript.py); the
    generation prompt for a message found waiting at boot then rendered that message a
    second time, so the ring held its tokens twice and every later warm boot kept them."""
    session = Session(long_model, tmp_path, "s", POLICY)
    session.boot()
    for n in range(6):
        session.turn(f"message number {n}", GREEDY, max_tokens=4)
    assert session.transcript.window_ok  # the window is trusted: the defect's condition
    assert session.save().error is None
    session.begin_turn("the one a kill left waiting", max_tokens=3)  # logged, not answered
    del session

    # Cold, as after a kill mid-save: the replay walks the transcript far enough to trust
    # its window (a warm boot's fresh transcript has not checked it yet).
    reopened = Session(long_model, tmp_path, "s", POLICY)
    assert reopened.boot(cold=True).kind == "cold"
    assert reopened.transcript.window_ok
    pending = reopened.begin_pending()
    assert pending is not None and pending.max_tokens == 3  # the sender's, not the default
    header = reopened.transcript.template.render(
        [{"role": "user", "content": "x"}], add_generation_prompt=True).split("x")[-1]
    assert len(pending.prompt) <= len(reopened.model.tokenizer.encode(header)) + 1
    reopened.respond(pending, GREEDY, pending.max_tokens)
    assert reopened.save().error is None
    report = verify_session(long_model, tmp_path, "s", POLICY)
    assert report.ok, report.problems
    assert report.compared_slots == reopened.conversation.ring.n_active


def test_defect4_queued_messages_replay_as_the_ring_took_them(long_model, tmp_path) -> None:
    """Three messages another program appended before the engine answered the first are in
    the stream as three questions and three answers; the engine fed each question right
    before its answer, and a replay must too (each reply names its message)."""
    session = Session(long_model, tmp_path, "s", POLICY)
    session.boot()
    sender = StreamLog(session.stream.path)
    sender.read()
    queued = [sender.append("user", f"queued question {n}") for n in range(3)]
    for event in queued:  # as the engine's poll answers them, one after the other
        session.respond(session.begin_external(event), GREEDY, 4)
    events = session.stream.read().events
    assert [e.role for e in events[1:]] == ["user"] * 3 + ["assistant"] * 3
    assert [e.extra["in_reply_to"] for e in events[4:]] == [e.id for e in queued]
    paired = taken_in(events, withdrawn_ids(events))
    assert [e.role for e in paired[1:]] == ["user", "assistant"] * 3
    assert [e.id for e in ring_order(events)] == [e.id for e in paired]

    assert session.save().error is None
    report = verify_session(long_model, tmp_path, "s", POLICY)
    assert report.ok, report.problems
    assert report.compared_slots == session.conversation.ring.n_active
    cold = Session(long_model, tmp_path, "s", POLICY)
    cold.boot(cold=True)
    assert cold.transcript.messages == session.transcript.messages


def test_a_crash_between_queued_answers_resumes_in_ring_order(long_model, tmp_path) -> None:
    """Killed after answering the first of three queued messages: the snapshot holds the
    first question and its answer, which is not a prefix of the stream (the other two
    questions come before that answer there). The warm boot feeds the two waiting ones, one
    reply answers both, and warm still equals cold."""
    session = Session(long_model, tmp_path, "s", POLICY)
    session.boot()
    sender = StreamLog(session.stream.path)
    sender.read()
    queued = [sender.append("user", f"queued question {n}") for n in range(3)]
    session.respond(session.begin_external(queued[0]), GREEDY, 4)
    assert session.save().error is None
    del session

    reopened = Session(long_model, tmp_path, "s", POLICY)
    boot = reopened.boot()
    assert boot.kind == "warm" and boot.replayed_events == 2
    pending = reopened.begin_pending()
    assert pending is not None and pending.event.id == queued[2].id
    reopened.respond(pending, GREEDY, 4)
    assert reopened.save().error is None
    report = verify_session(long_model, tmp_path, "s", POLICY)
    assert report.ok, report.problems


def test_verify_finds_a_state_the_stream_does_not_explain(long_model, tmp_path) -> None:
    session = Session(long_model, tmp_path, "s", POLICY)
    session.boot()
    session.turn("hello", GREEDY, max_tokens=4)
    session.conversation.ingest(long_model.tokenizer.encode(" stray tokens"))  # drift
    assert session.save().error is None
    report = verify_session(long_model, tmp_path, "s", POLICY)
    assert not report.ok
    assert report.problems[0].startswith(f"clock {report.warm_clock} warm, "
                                         f"{report.cold_clock} cold")
    assert report.warm_clock > report.cold_clock


def test_channel_snapshot_verify_says_match_or_drift(tiny_gguf, tiny_cache, tmp_path) -> None:
    common = ["--data-dir", str(tmp_path / "data"), "--cache-dir", str(tiny_cache),
              "--model", str(tiny_gguf)]
    chat = channel("chat", *common, "--session", "s", "--max-tokens", "3", "hello")
    assert chat.returncode == 0, chat.stderr
    done = channel("snapshot", "verify", "s", *common, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and report["warm_kind"] == "warm" and report["compared_slots"] > 0
    assert report["warm_clock"] == report["cold_clock"]
    # A line the snapshot's state never saw, yet whose id comes before its anchor: the warm
    # state cannot account for it, and verify says so.
    stream = tmp_path / "data" / "s.stream.jsonl"
    lines = stream.read_text().splitlines(keepends=True)
    first_user = next(i for i, line in enumerate(lines) if '"role":"user"' in
                      line.replace(" ", ""))
    event = json.loads(lines[first_user])
    event["content"] += " and something the state never saw"
    lines[first_user] = json.dumps(event) + "\n"
    stream.write_text("".join(lines))
    drifted = channel("snapshot", "verify", "s", *common)
    assert drifted.returncode == 1, drifted.stdout + drifted.stderr
    assert "DIFFERS from a cold replay" in drifted.stdout
    assert "problem: clock" in drifted.stdout


def test_defect3_concurrent_sends_each_print_their_own_reply(long_files, long_model,
                                                              tmp_path) -> None:
    """Five `channel send`s at once all printed the reply to one of them: each printed the
    first assistant line after its own message."""
    proc = spawn(tmp_path / "data", long_files[1], long_files[0],
                 ["--debounce-s", "30", "--backend", "numpy"])
    proc.wait_for("ready", timeout=60)
    proc.request({"type": "open", "session": "s"}, "booted")
    common = ["--data-dir", str(tmp_path / "data"), "--session", "s", "--timeout", "120",
              "--max-tokens", "6"]
    outputs: dict[int, subprocess.CompletedProcess] = {}

    def send(n: int) -> None:
        outputs[n] = channel("send", *common, f"concurrent message {n}")

    threads = [threading.Thread(target=send, args=(n,)) for n in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    events = StreamLog(tmp_path / "data" / "s.stream.jsonl").read().events
    asked = {e.content: e.id for e in events if e.role == "user"}
    replies = {e.extra["in_reply_to"]: e.content for e in events
               if e.role == "assistant" and "in_reply_to" in e.extra}
    for n, done in outputs.items():
        assert done.returncode == 0, done.stderr
        assert done.stdout == replies[asked[f"concurrent message {n}"]] + "\n"
    assert len(outputs) == 5 and len(set(replies)) == 5
    # However the five interleaved with the engine's answers, the saved state is the one a
    # cold replay builds (each question fed right before its answer).
    assert proc.request({"type": "save", "session": "s"}, "snapshot")["status"] == "saved"
    report = verify_session(long_model, tmp_path / "data", "s")
    assert report.ok and report.compared_slots > 0, report.problems
    assert proc.close() == 0


def test_a_line_written_during_a_reply_is_taken_in_by_a_rebuild(long_model, tmp_path) -> None:
    """Another program's line that lands while a reply decodes comes before the reply in
    the stream, yet is read after it; fed then, the ring would hold it after the reply. The
    session sees it is behind its anchor, and a rebuild takes it in where a replay would."""
    session = Session(long_model, tmp_path, "s", POLICY)
    session.boot()
    other = StreamLog(session.stream.path)
    written = []

    def on_text(piece: str) -> None:
        if not written:
            other.read()
            written.append(other.append("system", "a note another program wrote"))

    session.turn("hello there", GREEDY, max_tokens=6, on_text=on_text)
    late = written[0]
    assert session.behind_anchor(late)
    session.rebuild()
    assert session.transcript.messages[-1]["content"] == "a note another program wrote"
    assert session.save().error is None
    report = verify_session(long_model, tmp_path, "s", POLICY)
    assert report.ok, report.problems


@given(st.lists(st.booleans(), max_size=40))
def test_ring_order_is_the_order_the_engine_fed(actions: list[bool]) -> None:
    """Messages arrive (True) while the engine answers them first in, first out (False):
    the stream holds each line when it was written, the engine fed each message just
    before its answer, and messages still waiting at a crash come last, in arrival order
    (a boot feeds them then). ring_order rebuilds the engine's order from the file."""
    stream: list[StreamEvent] = []
    waiting: list[StreamEvent] = []
    fed: list[StreamEvent] = []
    for n, arrives in enumerate(actions):
        event_id = f"{n:026d}"  # increasing, as the stream's ids are
        if arrives:
            waiting.append(StreamEvent(event_id, "user", f"message {n}", "", {}))
            stream.append(waiting[-1])
        elif waiting:
            question = waiting.pop(0)
            stream.append(StreamEvent(event_id, "assistant", f"reply {n}", "",
                                      {"in_reply_to": question.id}))
            fed += [question, stream[-1]]
    assert [e.id for e in ring_order(stream)] == [e.id for e in fed + waiting]
