"""Rewind and fork to an earlier turn: warm from the link saved at that turn, or the nearest
before it (an archived generation too), else a replay, said before anything changes; the
state is the one the session had at the end of that turn."""

from __future__ import annotations

import numpy as np
import pytest

from channel_cli.cli import main
from engine.paths import SessionFiles
from engine.session.fork import fork_session
from engine.session.rewind import plan_rewind, rewind, turn_ends
from engine.session.session import Session
from engine.session.stream import StreamLog
from engine.snapshot.archive import generations
from engine.state.ring_policy import RingPolicy

from .test_snapshot import GREEDY, live_state

POLICY = RingPolicy().scaled_to(256)
TURNS = 6


def saved_each_turn(model, data_dir, name="s", share=8.0):
    """A session saved after each of TURNS turns; its state and next reply at each turn."""
    s = Session(model, data_dir, name, POLICY)
    s.snapshots.compact_share = share
    s.boot()
    states = [live_state(s.conversation)]
    for i in range(TURNS):
        s.turn(f"fact {i}: the box holds {i * 3} stones", GREEDY, max_tokens=4)
        s.save()
        states.append(live_state(s.conversation))
    return s, states


def assert_state_is(conv, state) -> None:
    now = live_state(conv)
    for name in ("slot_clock", "slot_pos", "ring_counters", "turn_starts"):
        np.testing.assert_array_equal(now[name], state[name], err_msg=name)
    np.testing.assert_allclose(now["k_cache"], state["k_cache"], atol=1e-3)


@pytest.mark.parametrize("back_to", [1, 3, 5])
def test_rewind_restores_the_turn_warm_and_the_next_reply_is_that_turns(
        tiny_model, tmp_path, back_to) -> None:
    s, states = saved_each_turn(tiny_model, tmp_path)
    plan = plan_rewind(s, back_to)
    assert plan.kind == "warm" and plan.turns == TURNS
    assert plan.replay_events == 0  # the link saved at that turn
    assert len(plan.retracted) == 2 * (TURNS - back_to)
    report = rewind(s, back_to)
    assert report.kind == "warm" and report.ms < 5000
    assert len(turn_ends(s.stream.read().events)) == back_to
    assert_state_is(s.conversation, states[back_to])
    # A restart lands in the same place, and the chain goes on from the restored link.
    s.save()
    again = Session(tiny_model, tmp_path, "s", POLICY)
    assert again.boot().kind == "warm"
    assert_state_is(again.conversation, states[back_to])


def test_a_turn_older_than_the_live_chain_restores_from_an_archive(tiny_model,
                                                                  tmp_path) -> None:
    s, states = saved_each_turn(tiny_model, tmp_path, share=0.05)  # a generation a save
    assert len(generations(s.snapshots.path)) >= 3
    plan = plan_rewind(s, 2)
    assert plan.kind == "warm" and "archived" in plan.link, plan
    assert rewind(s, 2).kind == "warm"
    assert_state_is(s.conversation, states[2])


def test_a_turn_no_kept_state_covers_is_replayed_and_says_so(tiny_model, tmp_path) -> None:
    s, states = saved_each_turn(tiny_model, tmp_path, share=0.05)
    s.snapshots.keep_links = 1  # the next complete save drops every archive
    s.snapshots.head = None
    s.turn("one more", GREEDY, max_tokens=2)
    s.save()
    assert generations(s.snapshots.path) == []
    plan = plan_rewind(s, 1)
    assert plan.kind == "replay" and "re-reads the conversation" in plan.describe()
    assert rewind(s, 1).kind == "cold"
    assert_state_is(s.conversation, states[1])
    # Turn 0, the bare system prompt, was never saved (the first save came after turn 1).
    assert plan_rewind(s, 0).kind == "replay"
    assert rewind(s, 0).kind == "cold"
    assert_state_is(s.conversation, states[0])


def test_bad_turns_are_refused_in_one_line(tiny_model, tmp_path) -> None:
    s, _ = saved_each_turn(tiny_model, tmp_path)
    for turn in (-1, TURNS, TURNS + 3):
        with pytest.raises(ValueError, match=f"the conversation has {TURNS} turn"):
            plan_rewind(s, turn)
    assert len(turn_ends(s.stream.read().events)) == TURNS  # nothing changed


def test_fork_at_a_turn_boots_warm_there_and_leaves_the_source(tiny_model, tmp_path) -> None:
    s, states = saved_each_turn(tiny_model, tmp_path, share=0.05)
    s.close()
    report = fork_session(tmp_path, "s", "early", turn=2)
    assert report.turn == 2
    fork = Session(tiny_model, tmp_path, "early", POLICY)
    boot = fork.boot()
    assert boot.kind == "warm", boot.reason
    assert_state_is(fork.conversation, states[2])
    assert len(turn_ends(fork.stream.read().events)) == 2
    assert len(turn_ends(s.stream.read().events)) == TURNS
    # The archives are shared as hard links, not copies.
    src = generations(SessionFiles(tmp_path, "s").snapshot)
    dst = generations(SessionFiles(tmp_path, "early").snapshot)
    assert dst and {g.base.name for g in dst} <= {g.base.name for g in src}
    assert dst[0].base.stat().st_nlink >= 2


def test_the_engine_plans_then_rewinds_and_a_restart_is_warm_there(engine, tmp_path) -> None:
    data = tmp_path / "data"
    proc = engine(data_dir=data)
    proc.request({"type": "open", "session": "s"}, "booted")
    for i in range(4):
        proc.request({"type": "turn", "session": "s", "text": f"note {i}", "max_tokens": 3},
                     "end_of_turn")
        proc.request({"type": "save", "session": "s"}, "snapshot")
    plan = proc.request({"type": "rewind", "session": "s", "turn": 2, "dry_run": True},
                        "rewind_plan")
    assert (plan["turn"], plan["turns"], plan["kind"]) == (2, 4, "warm")
    assert plan["text"].startswith("back to turn 2 of 4: restores the state kept in")
    assert len(plan["retracted"]) == 4
    bad = proc.request({"type": "rewind", "session": "s", "turn": 9}, "error")
    assert "no turn 9 to go back to" in bad["message"]
    done = proc.request({"type": "rewind", "session": "s", "turn": 2}, "rewound")
    assert done["method"] == "warm" and done["retracted"] == plan["retracted"]
    shown = [e for e in done["transcript"] if not e.get("hidden")]
    assert [e["content"] for e in shown if e["role"] == "user"] == ["note 0", "note 1"]
    proc.request({"type": "close", "session": "s"}, "closed")
    again = engine(data_dir=data)
    booted = again.request({"type": "open", "session": "s"}, "booted")
    assert booted["kind"] == "warm" and booted["replayed_events"] == 0, booted


def test_the_command_line_says_what_it_will_do_then_rewinds(capsys, tiny_model, tiny_gguf,
                                                            tiny_cache, tmp_path) -> None:
    saved_each_turn(tiny_model, tmp_path)[0].close()
    common = ["--data-dir", str(tmp_path), "--cache-dir", str(tiny_cache), "--model",
              str(tiny_gguf), "--backend", "numpy"]
    assert main(["rewind", "s", "--turn", "3", "--dry-run", *common]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("back to turn 3 of 6: restores the state kept in ")
    assert len(turn_ends(StreamLog(tmp_path / "s.stream.jsonl").read().events)) == TURNS
    assert main(["rewind", "s", "--turn", "3", *common]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(
        "rewound 's' to turn 3: 6 message(s) retracted, rebuilt warm in ")
    assert main(["rewind", "s", "--turn", "7", *common]) == 2
    assert capsys.readouterr().err.strip() == (
        "channel: error: no turn 7 to go back to: the conversation has 3 turn(s), and "
        "rewinding goes back to turns 0..2")
    assert main(["fork", "s", "t", "--turn", "1", *common]) == 0
    assert "forked 's' at turn 1 as 't'" in capsys.readouterr().out
