"""Rewind and fork to an earlier turn: warm from the link saved at that turn, or the nearest
before it (an archived generation too), else a replay, said before anything changes; the
state is the one the session had at the end of that turn."""

from __future__ import annotations

import numpy as np
import pytest

from engine.paths import SessionFiles
from engine.session.fork import fork_session
from engine.session.rewind import plan_rewind, rewind, turn_ends
from engine.session.session import Session
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
