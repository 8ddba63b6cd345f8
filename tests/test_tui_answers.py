"""Pilot tests of how the chat screen takes the answers to its own requests
(channel_tui/screens/chat_answers.py): errors go to the request that caused them, and only
there. The engine is tests/fake_engine.py, which never fails, so the failures are handed to
the screen as the app hands it any event."""

from __future__ import annotations

from channel_tui.messages import SessionEvent
from channel_tui.screens.chat_answers import Answer
from channel_tui.widgets.message_widgets import AssistantMessage

from .test_tui_snapshots import SIZE, booted, fake_app, until

REQ = 10_000  # far above the ids of the requests the app itself sends in these tests


def errors(app) -> list[str]:
    return [str(n.message) for n in app._notifications if n.severity == "error"]


async def answered(pilot, answer: Answer, event: dict) -> None:
    """Register `answer` as request REQ's, then let the screen take `event` answering it."""
    chat = pilot.app.chat
    chat.answers[REQ] = answer
    chat.post_message(SessionEvent({"req": REQ, "session": chat.session, **event}))
    await until(pilot, lambda: REQ not in chat.answers)
    await pilot.pause(0.1)


async def test_a_failed_turn_ends_its_reply_and_says_so_once(tmp_path) -> None:
    app = fake_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        chat = app.chat
        reply = await chat._reply()
        assert chat.busy
        await answered(pilot, chat.turn_answer(),
                       {"type": "error", "code": "internal", "message": "out of luck"})
        assert chat.current is None and not chat.busy and reply.stop == "failed"
        assert "The turn failed: out of luck" in str(chat.note_line.render())
        assert errors(app) == []  # the note says it; no toast besides
        # An error that answers no request of ours is a toast.
        chat.post_message(SessionEvent({"type": "error", "message": "bad line"}))
        await until(pilot, lambda: errors(app) == ["bad line"])


async def test_a_failed_save_and_restore_are_shown_where_they_were_asked(tmp_path) -> None:
    app = fake_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        chat = app.chat
        await answered(pilot, chat.save_answer(), {"type": "error", "message": "disk full"})
        assert chat.status_bar.snapshot == {"status": "failed", "error": "disk full"}
        assert errors(app) == ["Save failed: disk full"]
        await answered(pilot, chat.restore_answer(), {"type": "error", "message": "no file"})
        assert str(chat.query_one("#boot-line").render()) == "Restore failed: no file"
        assert len(chat.query(AssistantMessage)) == 1 and not chat.fatal


async def test_a_failed_open_stops_the_session_and_a_fatal_error_wins(tmp_path) -> None:
    app = fake_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        chat = app.chat
        # A fatal error is the engine's, whichever request it answers.
        chat.answers[REQ] = chat.open_answer()
        chat.post_message(SessionEvent({"type": "error", "req": REQ, "fatal": True,
                                        "message": "the model is gone"}))
        await until(pilot, lambda: chat.fatal)
        assert chat.fatal_message == "the model is gone" and REQ in chat.answers
        assert "engine stopped" in " ".join(p.plain for p in chat.status_bar.segments())
        await answered(pilot, chat.open_answer(), {"type": "error", "message": "locked"})
        assert chat.fatal_message == "Could not open session 'default': locked"
