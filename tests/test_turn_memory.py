"""What the ring still holds of each turn (engine/state/turn_memory.py) and how the app shows
it: the heat map's turn marks and counts, and "partly forgotten" on transcript messages."""

from __future__ import annotations

import numpy as np

from channel_tui.widgets.ring_view import turn_counts
from engine.conversation import Conversation
from engine.state.ring_policy import RingPolicy
from engine.state.turn_memory import turn_memory

POLICY = RingPolicy(max_slots=64, recent_window=8, evict_batch=8, prefill_chunk=16,
                    evict="window")


def turn(conv: Conversation, count: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    conv.ring.mark_turn_start()
    conv.ingest([int(t) for t in rng.integers(3, conv.model.config.vocab_size, size=count)])


def test_turns_are_whole_until_evicted_then_partly_then_forgotten(tiny_model) -> None:
    conv = Conversation(tiny_model, POLICY)
    conv.ingest([1, 2, 3], anchors=True)
    for i in range(3):
        turn(conv, 12, seed=i)
    turns, older_gone = turn_memory(conv.ring)
    assert [(t.tokens, t.kept, t.state) for t in turns] == [(12, 12, "whole")] * 3
    assert [t.first_slot for t in turns] == [3, 15, 27]
    assert older_gone  # nothing from before the first turn is in the ring (there is none)

    turn(conv, 30, seed=3)  # 3 + 36 + 30 > 64: `window` evicts the oldest 8 (one batch)
    turns, older_gone = turn_memory(conv.ring)
    assert conv.ring.evicted == 8
    assert [(t.tokens, t.kept, t.state) for t in turns] == [
        (12, 4, "partly"), (12, 12, "whole"), (12, 12, "whole"), (30, 30, "whole")]
    assert turns[0].first_slot == 3 and turns[1].first_slot == 7

    for i in range(4, 8):
        turn(conv, 20, seed=i)
    turns, older_gone = turn_memory(conv.ring)
    assert turns[0].state == "forgotten" and turns[0].first_slot is None
    assert turns[-1].state == "whole"
    # The kept tokens add up to the live slots outside the anchors.
    assert sum(t.kept for t in turns) == conv.ring.n_active - conv.ring.n_anchors
    assert older_gone


def test_a_ring_without_turns_reports_none(tiny_model) -> None:
    conv = Conversation(tiny_model, POLICY)
    conv.ingest([1, 2, 3], anchors=True)
    assert turn_memory(conv.ring) == ([], False)


def test_turn_counts_in_the_heat_map_legend() -> None:
    assert turn_counts([], False) == "0 turns in memory"
    assert turn_counts([[5, 5]], False) == "1 turn in memory"
    assert turn_counts([[5, 0], [5, 2], [5, 5], [4, 4]], False) == \
        "2 turns in memory · 1 partly · 1 forgotten"
    assert turn_counts([[5, 5]], True) == "1 turn in memory · older ones forgotten"


async def test_the_app_marks_turns_the_ring_forgot(tmp_path, tiny_gguf, tiny_cache) -> None:
    """Real engine, a 160-slot ring: after a few turns the first ones are evicted, and the
    transcript says so while the newest turn stays unmarked."""
    import sys

    from channel_tui.app import ChannelApp
    from channel_tui.options import AppOptions
    from channel_tui.widgets.message_widgets import AssistantMessage, UserMessage
    from channel_tui.widgets.ring_view import RingView
    from tests.test_tui_app import SIZE, booted, of_type, record_events, say

    app = ChannelApp(AppOptions(
        data_dir=tmp_path / "data", model=tiny_gguf, cache_dir=tiny_cache, max_tokens=12,
        debounce_s=60.0, export_dir=tmp_path,
        engine_command=[sys.executable, "-m", "engine", "--ring-slots", "160", "--evict",
                        "window"]))
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot, events)
        while not of_type(events, "ring") or of_type(events, "ring")[-1]["evicted"] == 0:
            await say(pilot, app, f"hi {len(app.chat.query(UserMessage))}", events)
        await say(pilot, app, "one more", events)
        await pilot.pause(0.2)
        ring = of_type(events, "ring")[-1]
        assert ring["evicted"] > 0 and ring["turns"]
        users = list(app.chat.query(UserMessage))
        replies = list(app.chat.query(AssistantMessage))
        assert users[0].memory in ("partly", "forgotten")
        assert users[0].border_title.startswith("you · ") and "forgotten" in users[0].border_title
        assert replies[0].memory == users[0].memory  # a turn is marked as one
        assert users[-1].memory == "whole" and users[-1].border_title == "you"
        # The heat map's legend counts them.
        await pilot.press("f2")
        await pilot.pause(0.1)
        legend = app.chat.query_one(RingView).render().plain
        assert "forgotten" in legend and "turns in memory" in legend
