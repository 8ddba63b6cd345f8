"""F9, the turn list: go back to an earlier turn (rewind) or fork from it
(channel_tui/screens/turns.py, chat_rewind.py). With tests/fake_engine.py, which answers
`rewind` (dry run and real) and `fork` with `turn`, so that every step can be seen; the real
engine's rewind through the app is the last test."""

from __future__ import annotations

from textual.widgets import OptionList

from channel_tui.export import ChatMessage
from channel_tui.messages import SessionEvent
from channel_tui.screens.chat_answers import Answer, ends_with
from channel_tui.screens.chat_rewind import PLANNING, REWINDING
from channel_tui.screens.new_session import NewSessionScreen
from channel_tui.screens.turns import (
    SYSTEM_ONLY,
    RewindScreen,
    Turn,
    TurnsScreen,
    first_line,
    turns_of,
)
from channel_tui.widgets.message_widgets import WITHDRAWN, UserMessage

from .fake_engine import SLOW_READ
from .test_tui_app import SIZE, booted, make_app, of_type, on_screen, record_events, say, until
from .test_tui_settings import fake_app, sent_requests

__all__ = ["make_app"]  # the fixture, shared with test_tui_app
FIRST = "How do I reverse a list in Python?"  # the fake engine's first turn


def users(app) -> list[str]:
    return [str(w.render()) for w in app.chat.query(UserMessage)]


def note(app) -> str:
    return str(app.chat.note_line.render())


def saved(events: list[dict]) -> list[dict]:
    return [e for e in of_type(events, "snapshot") if e.get("status") == "saved"]


def kinds(sent: list[tuple[str, dict]]) -> list[str]:
    return [kind for kind, _ in sent]


async def three_turns(pilot) -> None:
    app = pilot.app
    await until(pilot, lambda: app.chat.session_open and len(app.chat.messages) == 3,
                what="the fake boot")
    for text in ("And a tuple?", "Why is that?\nAnd a second line"):
        count = len(app.chat.messages)
        app.chat.prompt.load_text(text)
        await pilot.press("enter")
        await until(pilot, lambda c=count: len(app.chat.messages) == c + 2
                    and app.chat.current is None, what="the reply")
    await pilot.pause(0.1)


async def open_turns(pilot) -> OptionList:
    await pilot.press("f9")
    await until(pilot, lambda: on_screen(pilot.app, TurnsScreen), what="the list")
    await pilot.pause(0.1)
    return pilot.app.screen.query_one(OptionList)


def test_turns_are_the_user_messages_the_ring_took_in() -> None:
    messages = [ChatMessage("system", "be brief"), ChatMessage("user", "one"),
                ChatMessage("assistant", "1", stop="eot"),
                ChatMessage("user", "\n  two\nmore"),
                ChatMessage("assistant", "", stop="cancelled"),
                ChatMessage("user", "stopped"), ChatMessage("assistant", "", stop=WITHDRAWN),
                ChatMessage("user", "three"), ChatMessage("assistant", "3", stop="eot")]
    assert turns_of(messages) == [Turn(0, SYSTEM_ONLY), Turn(1, "one"), Turn(2, "two"),
                                  Turn(3, "three")]
    assert turns_of([]) == [Turn(0, SYSTEM_ONLY)]
    assert first_line("x" * 100, 10) == "x" * 9 + "…"


async def test_rewind_from_the_list_after_a_dry_run_and_esc_at_each_step(tmp_path) -> None:
    app = fake_app(tmp_path)
    sent = sent_requests(app)
    async with app.run_test(size=SIZE) as pilot:
        await three_turns(pilot)
        before = list(app.chat.messages)
        assert users(app) == [FIRST, "And a tuple?", "Why is that?\nAnd a second line"]

        options = await open_turns(pilot)  # newest at the bottom, the current one marked
        labels = [str(options.get_option_at_index(i).prompt) for i in range(4)]
        assert labels == ["  0  (system prompt only)", f"  1  {FIRST}", "  2  And a tuple?",
                          "  3  Why is that?  ● now"]
        assert options.get_option_at_index(3).disabled and options.highlighted == 2
        await pilot.press("escape")  # Esc on the list: nothing asked, nothing changed
        await until(pilot, lambda: app.screen is app.chat, what="the list to close")
        assert "rewind" not in kinds(sent) and app.chat.messages == before

        options = await open_turns(pilot)
        await pilot.press("up", "enter")  # turn 1: the engine's dry run, then the question
        await until(pilot, lambda: on_screen(app, RewindScreen), what="the plan")
        assert sent[-1] == ("rewind", {"session": "default", "turn": 1, "dry_run": True})
        plan = str(app.screen.query_one("#rewind-plan").render())
        assert plan == ("Back to turn 1 of 3: restores the state kept in the snapshot and 1 "
                        "segment(s), then re-reads 0 message(s)")
        assert FIRST in str(app.screen.query_one("#rewind-question").render())
        await pilot.press("escape")  # Esc on the question: still nothing changed
        await until(pilot, lambda: app.screen is app.chat, what="the question to close")
        assert kinds(sent).count("rewind") == 1 and app.chat.messages == before

        await open_turns(pilot)
        await pilot.press("up", "enter")
        await until(pilot, lambda: on_screen(app, RewindScreen), what="the plan")
        await pilot.press("r")
        await until(pilot, lambda: len(app.chat.messages) == 3, what="the rewind")
        assert sent[-1] == ("rewind", {"session": "default", "turn": 1})
        await pilot.pause(0.1)
        assert users(app) == [FIRST] and app.chat.messages == before[:3]
        assert note(app) == "Back to turn 1 (warm, 12 ms) · took back 4 message(s)"

        await say_fake(pilot, "Start again")  # the conversation goes on from turn 1
        options = await open_turns(pilot)
        assert options.option_count == 3 and options.get_option_at_index(2).disabled
        await pilot.press("escape")


async def say_fake(pilot, text: str) -> None:
    app = pilot.app
    count = len(app.chat.messages)
    app.chat.prompt.load_text(text)
    await pilot.press("enter")
    await until(pilot, lambda: len(app.chat.messages) == count + 2 and app.chat.current is None,
                what="the reply")


async def test_fork_from_an_earlier_turn_asks_a_name_and_switches(tmp_path) -> None:
    app = fake_app(tmp_path)
    sent = sent_requests(app)
    async with app.run_test(size=SIZE) as pilot:
        await three_turns(pilot)
        before = list(app.chat.messages)
        await open_turns(pilot)
        await pilot.press("up", "up", "enter")  # turn 0, the system prompt alone
        await until(pilot, lambda: on_screen(app, RewindScreen), what="the plan")
        assert "re-reads the conversation" in str(app.screen.query_one("#rewind-plan").render())
        await pilot.press("f")
        await until(pilot, lambda: on_screen(app, NewSessionScreen), what="the name")
        assert app.screen.title_text == "Fork from turn 0"
        await pilot.press("escape")  # Esc on the name: no fork
        await until(pilot, lambda: app.screen is app.chat, what="the name to close")
        assert "fork" not in kinds(sent) and app.chat.messages == before

        await open_turns(pilot)
        await pilot.press("enter")  # turn 2
        await until(pilot, lambda: on_screen(app, RewindScreen), what="the plan")
        await pilot.press("f")
        await until(pilot, lambda: on_screen(app, NewSessionScreen), what="the name")
        assert app.screen.query_one("#new-name").value == "default-fork"
        await pilot.press("enter")
        await until(pilot, lambda: app.chat.session == "default-fork" and
                    app.chat.session_open, what="the fork to open")
        assert ("fork", {"session": "default", "new": "default-fork", "turn": 2}) in sent
        await pilot.pause(0.1)
        assert users(app) == [FIRST, "And a tuple?"]
        assert any("Forked 'default' from turn 2 as 'default-fork'" in str(n.message)
                   for n in app._notifications)


async def test_f9_while_a_reply_is_written_says_so_and_loses_nothing(tmp_path) -> None:
    app = fake_app(tmp_path)
    sent = sent_requests(app)
    async with app.run_test(size=SIZE) as pilot:
        await three_turns(pilot)
        app.chat.prompt.load_text(f"{SLOW_READ} a long report")
        await pilot.press("enter")  # read slowly until a cancel: the reply stays under way
        await until(pilot, lambda: app.chat.busy, what="the read")
        app.chat.prompt.load_text("my draft")
        await pilot.press("f9")
        await pilot.pause(0.1)
        assert app.screen is app.chat and "rewind" not in kinds(sent)
        assert note(app) == ("A reply is being written: wait for it to end (Esc stops it), "
                             "then rewind (F9).")
        assert app.chat.prompt.text == "my draft"
        await pilot.press("escape")  # stop the read: the message is withdrawn
        await until(pilot, lambda: not app.chat.busy, what="the withdrawal")

        # A reply that begins while the list is open: choosing a turn then asks nothing.
        options = await open_turns(pilot)
        assert options.option_count == 4  # the withdrawn message is no turn
        app.chat.post_message(SessionEvent({"type": "turn_started", "session": "default"}))
        await until(pilot, lambda: app.chat.busy, what="the other reply")
        await pilot.press("enter")
        await until(pilot, lambda: app.screen is app.chat, what="the list to close")
        assert "rewind" not in kinds(sent) and "A reply is being written" in note(app)
        assert app.chat.prompt.text == "my draft"


async def test_errors_are_shown_and_a_message_typed_during_a_rewind_waits(tmp_path) -> None:
    app = fake_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await three_turns(pilot)
        chat = app.chat
        chat._plan_rewind(Turn(7, "none"), 3)  # the engine refuses: one line says why
        await until(pilot, lambda: "Cannot rewind" in note(app), what="the refusal")
        assert note(app).startswith("Cannot rewind: no turn 7 to go back to")
        chat._rewind(Turn(9, "none"))
        await until(pilot, lambda: "Rewind failed" in note(app), what="the failure")
        assert len(chat.messages) == 7

        # Esc while the engine plans a rewind: its plan is not shown.
        planning = 9_000
        chat.answers[planning] = Answer({PLANNING: lambda event: chat._planned(
            Turn(1, FIRST), event)}, ends_with(PLANNING))
        await pilot.press("escape")
        assert planning not in chat.answers and note(app) == "Rewind cancelled; nothing changed."
        chat.post_message(SessionEvent({"type": PLANNING, "req": planning, "session": "default",
                                        "turn": 1, "turns": 3, "text": "back to turn 1"}))
        await pilot.pause(0.2)
        assert app.screen is chat

        # A rewind under way (its answer pending): a message typed is queued, then sent
        # once the rewound transcript is shown.
        req = 10_000
        chat.answers[req] = Answer({REWINDING: chat.handle_rewound}, ends_with(REWINDING))
        await pilot.press("f9")
        assert "A rewind is under way" in note(app)
        chat.prompt.load_text("after the rewind")
        await pilot.press("enter")
        await pilot.pause(0.1)
        assert chat.queued == "after the rewind" and "the rewind is done" in note(app)
        transcript = [{"id": m.id or f"x{i}", "role": m.role, "content": m.content,
                       "stop": m.stop} for i, m in enumerate(chat.messages[:3])]
        chat.post_message(SessionEvent({"type": REWINDING, "req": req, "session": "default",
                                        "turn": 1, "turns": 3, "method": "warm", "ms": 5.0,
                                        "retracted": ["a", "b", "c", "d"],
                                        "transcript": transcript}))
        await until(pilot, lambda: chat.queued is None and len(chat.messages) == 5
                    and chat.current is None, what="the queued message to be answered")
        assert users(app) == [FIRST, "after the rewind"]


async def test_the_real_engine_rewinds_warm_through_the_turn_list(make_app) -> None:
    app = make_app()
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot, events)
        for n, text in enumerate(("first question", "second question", "third question")):
            await say(pilot, app, text, events)
            # Saved after each turn (the autosave waits a minute here): a rewind restores
            # the link kept at the turn it goes back to.
            await pilot.press("ctrl+s")
            await until(pilot, lambda n=n: len(saved(events)) > n, what="the save")
        assert users(app) == ["first question", "second question", "third question"]

        options = await open_turns(pilot)
        assert options.option_count == 4 and options.highlighted == 2
        await pilot.press("up", "enter")  # turn 1
        await until(pilot, lambda: on_screen(app, RewindScreen), what="the plan")
        plan = of_type(events, "rewind_plan")[-1]
        assert plan["turn"] == 1 and plan["turns"] == 3 and plan["kind"] == "warm"
        assert str(app.screen.query_one("#rewind-plan").render()).startswith(
            "Back to turn 1 of 3")
        await pilot.press("enter")
        await until(pilot, lambda: of_type(events, "rewound"), what="the rewind")
        rewound = of_type(events, "rewound")[-1]
        assert rewound["method"] == "warm" and rewound["turn"] == 1
        await pilot.pause(0.2)
        assert users(app) == ["first question"]
        assert [m.role for m in app.chat.messages] == ["system", "user", "assistant"]
        assert note(app).startswith("Back to turn 1 (warm, ")
        await say(pilot, app, "a new second question", events)  # and it goes on from there
        assert users(app) == ["first question", "a new second question"]

        await open_turns(pilot)  # fork from turn 1: the source stays as it is
        await pilot.press("enter")
        await until(pilot, lambda: on_screen(app, RewindScreen), what="the plan")
        await pilot.press("f")
        await until(pilot, lambda: on_screen(app, NewSessionScreen), what="the name")
        await pilot.press("enter")
        await until(pilot, lambda: of_type(events, "forked"), what="the fork")
        forked = of_type(events, "forked")[-1]
        assert forked["turn"] == 1 and forked["session"] == "default"
        await until(pilot, lambda: app.chat.session == forked["new"] and app.chat.session_open,
                    what="the fork to open")
        await pilot.pause(0.2)
        assert users(app) == ["first question"]
        fork_boot = of_type(events, "booted", session=forked["new"])[-1]
        assert fork_boot["kind"] == "warm"  # from the link kept at turn 1
