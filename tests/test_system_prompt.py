"""The system prompt (issue 29): a new session starts from the one asked for; an open
session keeps its own (it is pinned at the head of the ring, and every later K/V was
computed with it in view); a fork may start from another, and then replays the
conversation under it instead of copying a stale snapshot. Real engine processes on the
tiny model, real files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.model.chat_template import ChatTemplateError
from engine.model.model import Model, load_model
from engine.session.fork import fork_session, system_prompt
from engine.session.session import Session
from engine.session.stream import StreamLog
from engine.state.sampler import SamplingSettings

from .tiny_model import NO_SYSTEM_TEMPLATE, write_tiny_gguf_with_template

GREEDY = SamplingSettings()
PROMPT = "You answer in one short sentence."


def events(data: Path, name: str) -> list:
    return StreamLog(data / f"{name}.stream.jsonl").read().events


def test_a_new_session_starts_from_the_system_prompt_asked_for(engine, tmp_path) -> None:
    e = engine()
    booted = e.request({"type": "open", "session": "s", "system": PROMPT}, "booted")
    assert booted["type"] == "booted", booted
    assert booted["transcript"][0]["role"] == "system"
    assert booted["transcript"][0]["content"] == PROMPT
    ring = e.wait_for(lambda ev: ev.get("type") == "ring" and ev.get("session") == "s", 30)
    assert ring["anchors"] > 0  # pinned, as the template's own prompt would be
    end = e.request({"type": "turn", "session": "s", "text": "hi", "max_tokens": 3},
                    "end_of_turn")
    assert end["type"] == "end_of_turn", end
    assert system_prompt(events(tmp_path / "data", "s")) == PROMPT


def test_an_existing_session_keeps_its_system_prompt_and_says_so(engine, tmp_path) -> None:
    e = engine()
    e.request({"type": "open", "session": "s"}, "booted")  # the template's own prompt
    e.request({"type": "close", "session": "s"}, "closed")
    opened = e.send({"type": "open", "session": "s", "system": PROMPT})
    warning = e.wait_for(lambda ev: ev.get("req") == opened and ev["type"] in (
        "warning", "error"), 30)
    assert warning["type"] == "warning" and "keeps its system prompt" in warning["message"]
    assert system_prompt(events(tmp_path / "data", "s")) == "You are a tiny test model."


def test_a_fork_with_another_system_prompt_replays_under_it(engine, tmp_path) -> None:
    data = tmp_path / "data"
    e = engine()
    e.request({"type": "open", "session": "s"}, "booted")
    e.request({"type": "turn", "session": "s", "text": "remember the word teal",
               "max_tokens": 4}, "end_of_turn")
    before = (data / "s.stream.jsonl").read_bytes()
    forked = e.request({"type": "fork", "session": "s", "new": "t", "system": PROMPT},
                       "forked")
    assert forked["type"] == "forked" and forked["system_changed"], forked
    assert forked["snapshot_bytes"] == 0  # the source's K/V saw the old prompt
    assert (data / "s.stream.jsonl").read_bytes() == before  # the source is only read
    assert not (data / "t.snapshot.bin").exists()
    booted = e.request({"type": "open", "session": "t"}, "booted")
    assert booted["kind"] == "cold", booted
    shown = [(m["role"], m["content"]) for m in booted["transcript"] if not m["hidden"]]
    assert shown[0] == ("system", PROMPT)
    assert ("user", "remember the word teal") in shown
    end = e.request({"type": "turn", "session": "t", "text": "which word?", "max_tokens": 3},
                    "end_of_turn")
    assert end["type"] == "end_of_turn", end


def test_the_fork_equals_a_session_started_with_that_prompt(tiny_model, tmp_path) -> None:
    """The fork's replayed ring is the ring a session started with the new prompt builds."""
    first = Session(tiny_model, tmp_path, "a")
    first.open()
    reply = first.turn("one", GREEDY, max_tokens=4)
    first.close()
    fork_session(tmp_path, "a", "b", PROMPT, tiny_model.template.check_system_prompt)
    forked = Session(tiny_model, tmp_path, "b")
    assert forked.open().kind == "cold" and forked.system_prompt == PROMPT

    fresh = Session(tiny_model, tmp_path / "fresh", "c")
    fresh.open(system=PROMPT)
    fresh.conversation.ingest(fresh.transcript.user_turn("one"))
    fresh.conversation.ingest(reply.reply_ids)  # a reply is fed as the ids sampled
    fresh.conversation.ingest(fresh.transcript.close_assistant(reply.reply))
    assert forked.transcript.rendered == fresh.transcript.rendered
    assert forked.conversation.ring.n_anchors == fresh.conversation.ring.n_anchors
    n = forked.conversation.ring.n_active
    assert n == fresh.conversation.ring.n_active
    np.testing.assert_allclose(forked.conversation.arena.views().k_cache[:, :n],
                               fresh.conversation.arena.views().k_cache[:, :n], atol=1e-4)


def answered_on_template(tmp_path, template: str) -> tuple[Model, Path]:
    """The tiny model under `template`, and a data directory where session 'a' has had one
    answered turn."""
    model = load_model(write_tiny_gguf_with_template(tmp_path / "model.gguf", template),
                       tmp_path / "cache")
    data = tmp_path / "data"
    session = Session(model, data, "a")
    session.open()
    session.turn("hello", GREEDY, max_tokens=3)
    session.close()
    return model, data


def test_a_prompt_goes_in_front_when_the_source_has_none(tmp_path) -> None:
    """A template without a prompt of its own (ChatML here, Gemma's): the fork's stream
    gets one before everything, an earlier fork's marker included."""
    plain = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
             "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
             "{% endif %}")
    model, data = answered_on_template(tmp_path, plain)
    assert system_prompt(events(data, "a")) is None  # the template added none
    fork_session(data, "a", "b")  # a marker first
    fork_session(data, "b", "c", PROMPT, model.template.check_system_prompt)
    ids = [e.id for e in events(data, "c")]
    assert ids == sorted(ids)  # still in order
    forked = Session(model, data, "c")
    assert forked.open().kind == "cold" and forked.system_prompt == PROMPT
    assert forked.transcript.messages[1] == {"role": "user", "content": "hello"}


def test_a_template_that_refuses_a_system_prompt_leaves_no_fork(tmp_path) -> None:
    model, data = answered_on_template(tmp_path, NO_SYSTEM_TEMPLATE)
    with pytest.raises(ChatTemplateError, match="takes no system prompt.*no system messages"):
        fork_session(data, "a", "b", PROMPT, model.template.check_system_prompt)
    assert not any(data.glob("b.*"))
    with pytest.raises(ChatTemplateError, match="takes no system prompt"):
        Session(model, data, "n").open(system=PROMPT)
