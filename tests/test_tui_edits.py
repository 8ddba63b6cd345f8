"""Pilot tests, against the REAL engine subprocess (tiny random model), of what a persistent
working state makes possible in the app: typing before the engine is ready, regenerate, undo,
edit and resend, fork, copy, and the command palette listing every action."""

from __future__ import annotations

import sys

from channel_tui.widgets.message_widgets import AssistantMessage, UserMessage
from channel_tui.widgets.prompt import Prompt

from .test_tui_app import SIZE, booted, make_app, of_type, record_events, say, until

__all__ = ["make_app"]  # the fixture, shared with test_tui_app


def users(app) -> list[str]:
    return [str(w.render()) for w in app.chat.query(UserMessage)]


# The real engine, started 3 s late, so the message is typed while it is surely still
# starting (a tiny model is otherwise ready within the keypress on a quiet machine).
LATE_ENGINE = [sys.executable, "-c",
               "import os, sys, time; time.sleep(3); "
               "os.execv(sys.executable, [sys.executable, '-m', 'engine', *sys.argv[1:]])"]


async def test_a_message_typed_before_the_engine_is_ready_is_queued_then_sent(
        make_app) -> None:
    app = make_app(engine_command=LATE_ENGINE)
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        assert not app.chat.session_open  # the engine is still starting
        app.chat.query_one(Prompt).load_text("are you there?")
        await pilot.press("enter")
        await pilot.pause(0.1)
        assert app.chat.queued == "are you there?"
        pending = app.chat.queued_widget
        assert pending is not None and "pending" in str(pending.border_title)
        assert "sends when the engine is ready" in str(app.chat.query_one("#note").render())
        await booted(pilot, events)
        await until(pilot, lambda: of_type(events, "end_of_turn"), what="the answer")
        await until(pilot, lambda: app.chat.current is None, what="the reply to end")
        assert app.chat.queued is None
        assert users(app) == ["are you there?"]  # shown once, no longer pending
        assert [m.role for m in app.chat.messages][-2:] == ["user", "assistant"]
        assert app.chat.messages[-2].content == "are you there?"


async def test_regenerate_undo_edit_copy_and_fork(make_app) -> None:
    app = make_app()
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot, events)
        first = await say(pilot, app, "first question", events)
        # The user's own message is shown above the model's reply.
        widgets = list(app.chat.query_one("#transcript").children)
        assert isinstance(widgets[-2], UserMessage) and isinstance(widgets[-1], AssistantMessage)

        await pilot.press("ctrl+t")  # copy the reply
        assert app.clipboard == first["reply"]

        await pilot.press("ctrl+g")  # regenerate: rolled back, decoded again
        await until(pilot, lambda: len(of_type(events, "end_of_turn")) == 2, what="again")
        undone = of_type(events, "undone")[-1]
        assert undone["method"] == "rollback" and of_type(events, "end_of_turn")[-1][
            "prompt_tokens"] == 0
        await until(pilot, lambda: app.chat.current is None, what="the reply to end")
        assert [m.role for m in app.chat.messages] == ["system", "user", "assistant"]
        assert len(app.chat.query(AssistantMessage)) == 1

        await say(pilot, app, "second question", events)
        await pilot.press("f3")  # undo the second turn
        await until(pilot, lambda: len(of_type(events, "undone")) == 2, what="undo")
        await pilot.pause(0.2)
        assert users(app) == ["first question"]

        await pilot.press("f4")  # edit and resend the first question
        await until(pilot, lambda: len(of_type(events, "undone")) == 3, what="edit")
        await pilot.pause(0.2)
        prompt = app.chat.query_one(Prompt)
        assert prompt.text == "first question" and users(app) == []
        prompt.load_text("first question, edited")
        await pilot.press("enter")
        await until(pilot, lambda: len(of_type(events, "end_of_turn")) == 4, what="resent")
        assert users(app) == ["first question, edited"]

        await pilot.press("ctrl+f")  # fork under the suggested name
        await pilot.pause(0.3)
        await pilot.press("enter")
        await until(pilot, lambda: of_type(events, "forked"), what="forked")
        new = of_type(events, "forked")[-1]["new"]
        await until(pilot, lambda: app.chat.session == new and app.chat.session_open,
                    what="the fork to open")
        fork_boot = of_type(events, "booted", session=new)[-1]
        assert fork_boot["kind"] == "warm" and fork_boot["replayed_events"] == 0
        assert users(app) == ["first question, edited"]


async def test_every_action_is_in_the_command_palette(make_app) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        titles = {c.title for c in app.get_system_commands(app.chat)}
        for binding in app.chat.BINDINGS:
            assert binding.description in titles, binding.id
        await pilot.press("ctrl+p")
        await pilot.pause(0.2)
        assert type(app.screen).__name__ == "CommandPalette"
