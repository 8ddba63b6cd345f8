"""Lines other programs append to an open session's stream, taken in by the engine's poll
(engine/process/stream_poll.py), in process: the failure paths a subprocess cannot reach."""

from __future__ import annotations

import pytest

from engine.process.protocol import parse_request
from engine.process.server import EngineServer
from engine.session.stream import StreamLog


def open_session(tmp_path, tiny_model) -> tuple[EngineServer, list[dict]]:
    events: list[dict] = []
    server = EngineServer(tiny_model, tmp_path, events.append, debounce_s=3600)
    server._dispatch(("request", parse_request('{"type": "open", "session": "s"}')))
    return server, events


def test_a_failed_answer_leaves_the_rest_of_the_batch_for_the_next_poll(
        tmp_path, tiny_model, monkeypatch) -> None:
    server, events = open_session(tmp_path, tiny_model)
    runtime = server.sessions["s"]
    # Another program (`channel send`, a script) appends two messages before the engine
    # polls: one batch.
    outside = StreamLog(tmp_path / "s.stream.jsonl")
    first = outside.append("user", "first from a script")
    second = outside.append("user", "second from a script")
    conversation = runtime.session.conversation
    ingest, calls = conversation.ingest, []

    def fail_once(tokens, **kw):  # the first prompt's prefill fails
        calls.append(len(tokens))
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return ingest(tokens, **kw)

    monkeypatch.setattr(conversation, "ingest", fail_once)
    with pytest.raises(OSError, match="No space left"):
        server._poll("s")
    assert [e.id for e in runtime.unhandled] == [second.id]
    server._poll("s")  # the next poll (a watcher event, or a turn) goes on from there
    assert runtime.unhandled == []
    answered = [e for e in events if e["type"] == "end_of_turn" and e["req"] is None]
    assert len(answered) == 1 and answered[0]["reply"]
    announced = [e["id"] for e in events if e["type"] == "stream_event"]
    assert announced == [first.id, second.id]  # each said once, in order
    # The failed message was withdrawn (the stream keeps it); the second was answered.
    stream = StreamLog(tmp_path / "s.stream.jsonl").read().events
    withdrawn = [e.extra["withdraws"] for e in stream if "withdraws" in e.extra]
    replies = [e.extra["in_reply_to"] for e in stream if "in_reply_to" in e.extra]
    assert withdrawn == [first.id] and replies == [second.id]
    server._poll("s")  # nothing new: nothing answered twice
    assert len([e for e in events if e["type"] == "end_of_turn"]) == 1
