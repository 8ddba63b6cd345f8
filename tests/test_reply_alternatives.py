"""A message's earlier replies stay reachable (issue 29, item 4): after Ctrl+G, the reply it
replaced can be brought back. The ring then holds exactly what it held with that reply, the
stream records the choice, and a cold replay builds the same state. The REAL engine code on
the tiny model; a real engine process for the protocol."""

from __future__ import annotations

import numpy as np

from engine.session.alternatives import RESTORES, alternatives, chosen_reply, reply_origin
from engine.session.session import Session
from engine.session.undo import undo
from engine.session.verify import verify_session
from engine.state.sampler import SamplingSettings

SAMPLED = SamplingSettings(temperature=30.0, top_k=0, top_p=1.0, min_p=0.0, seed=5)


def ring_rows(session: Session) -> tuple[np.ndarray, np.ndarray, str]:
    conv = session.conversation
    n = conv.ring.n_active
    v = conv.arena.views()
    return v.k_cache[:, :n].copy(), v.slot_pos[:n].copy(), session.transcript.rendered


def test_bringing_back_a_reply_restores_the_state_it_had(tiny_model, tmp_path) -> None:
    session = Session(tiny_model, tmp_path, "s")
    session.open()
    first = session.turn("pick a colour", SAMPLED, max_tokens=8)
    with_first = ring_rows(session)

    report, pending = undo(session, keep_user=True)  # Ctrl+G: another seed, another reply
    second = session.respond(pending, SamplingSettings(temperature=30.0, top_k=0, top_p=1.0,
                                                       min_p=0.0), 8)
    assert second.reply_ids != first.reply_ids

    events = session.stream.read().events
    user = next(e for e in reversed(events) if e.role == "user")
    assert [e.id for e in alternatives(events, user.id)] == [first.event_id, second.event_id]
    earlier = chosen_reply(session, first.event_id)
    report, pending = undo(session, keep_user=True)
    assert report.method == "rollback"  # nothing re-read
    back = session.respond(pending, SAMPLED, 8, reuse=earlier)
    assert back.reply == first.reply and back.reply_ids == first.reply_ids
    k, pos, rendered = ring_rows(session)
    assert rendered == with_first[2]
    np.testing.assert_array_equal(pos, with_first[1])
    np.testing.assert_allclose(k, with_first[0], atol=1e-4)

    restored = session.stream.read().events[-1]
    assert restored.extra[RESTORES] == first.event_id and reply_origin(restored) == first.event_id
    # Still two replies, not three: the restored one counts as the first.
    events = session.stream.read().events
    assert [reply_origin(e) for e in alternatives(events, user.id)] == [first.event_id,
                                                                       second.event_id]
    session.save(wait=True)
    session.close()
    report = verify_session(tiny_model, tmp_path, "s")  # the saved state equals a cold replay
    assert report.ok, report.problems


def test_the_protocol_brings_a_reply_back_and_refuses_what_it_cannot(engine, tmp_path) -> None:
    e = engine()
    e.request({"type": "open", "session": "s"}, "booted")
    sampled = {"temperature": 30.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "max_tokens": 8}
    first = e.request({"type": "turn", "session": "s", "text": "pick a colour", "seed": 5,
                       **sampled}, "end_of_turn")
    second = e.request({"type": "regenerate", "session": "s", **sampled}, "end_of_turn")
    assert second["type"] == "end_of_turn" and second["event_id"] != first["event_id"]
    stream = tmp_path / "data" / "s.stream.jsonl"

    for reply, words in ((second["event_id"], "the one the conversation has now"),
                         ("01ARZ3NDEKTSV4RRFFQ69G5FAV", "not a reply to the last message")):
        before = stream.read_bytes()
        refused = e.request({"type": "regenerate", "session": "s", "reply": reply},
                            "end_of_turn")
        assert refused["type"] == "error" and words in refused["message"], refused
        assert "\n" not in refused["message"] and stream.read_bytes() == before
    bad = e.request({"type": "regenerate", "session": "s", "reply": "x" * 500}, "end_of_turn")
    assert bad["type"] == "error" and bad["code"] == "bad_request" and len(bad["message"]) < 200

    request = e.send({"type": "regenerate", "session": "s", "reply": first["event_id"]})
    undone = e.wait_for(lambda ev: ev.get("req") == request and ev["type"] == "undone", 30)
    assert undone["method"] == "rollback"
    back = e.wait_for(lambda ev: ev.get("req") == request and ev["type"] == "end_of_turn", 30)
    assert back["reply"] == first["reply"] and back["restores"] == first["event_id"]
    assert back["seed"] == first["seed"]

    e.request({"type": "close", "session": "s"}, "closed")
    booted = e.request({"type": "open", "session": "s"}, "booted")
    assert booted["kind"] == "warm"
    user = [m for m in booted["transcript"] if m["role"] == "user"][-1]
    replies = [m for m in booted["transcript"] if m["role"] == "assistant"
               and m.get("in_reply_to") == user["id"]]
    shown = [m for m in replies if not m["hidden"]]
    assert len(shown) == 1 and shown[0]["restores"] == first["event_id"]
    assert shown[0]["content"] == first["reply"]
