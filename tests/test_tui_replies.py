"""Stepping through the last message's replies (issue 29, item 4): Ctrl+G keeps the reply it
replaces, Alt+← brings it back and Alt+→ steps forward again, each a reply the engine takes
in again from its recorded tokens. The REAL engine on the tiny model."""

from __future__ import annotations

from channel_tui.replies import ReplyChoices
from channel_tui.settings import save_settings
from channel_tui.widgets.message_widgets import AssistantMessage, UserMessage

from .test_tui_app import SIZE, booted, make_app, of_type, record_events, say, until

__all__ = ["make_app"]  # the fixture, shared with test_tui_app
# The tiny random model is all but certain of its next token; this makes its replies differ.
SAMPLED = {"temperature": 30.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "max_tokens": 6}


def test_reply_choices_count_replies_by_what_they_are() -> None:
    transcript = [
        {"id": "u1", "role": "user"},
        {"id": "a1", "role": "assistant", "in_reply_to": "u1", "hidden": True},
        {"id": "a2", "role": "assistant", "in_reply_to": "u1", "hidden": True},
        {"id": "r1", "role": "assistant", "stop": "retracted", "hidden": True},
        {"id": "a3", "role": "assistant", "in_reply_to": "u1", "restores": "a1"},
    ]
    choices = ReplyChoices.from_transcript(transcript)
    assert choices.origins == ["a1", "a2"] and choices.shown == 0
    assert choices.label() == "reply 1 of 2 · Alt+←/→"
    assert choices.step(-1) is None and choices.step(1) == "a2"
    choices.answered("u1", "a4")  # Ctrl+G again: a third
    assert choices.label().startswith("reply 3 of 3")
    choices.answered("u2", "b1")  # a new message: its replies start over
    assert choices.origins == ["b1"] and choices.label() == ""


async def test_alt_arrows_step_through_the_replies_ctrl_g_kept(make_app, tmp_path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    save_settings(data_dir, "default", SAMPLED)
    app = make_app(data_dir=data_dir)
    events = record_events(app)

    def shown() -> tuple[str, str]:
        last = app.chat.query(AssistantMessage).last()
        return last.text, last.detail

    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot, events)
        first = await say(pilot, app, "pick a colour", events)
        assert "reply 1 of" not in shown()[1]  # one reply: nothing to step through
        await pilot.press("alt+left")
        await pilot.pause(0.1)
        assert "one reply" in str(app.chat.note_line.render())

        message = app.chat.query(UserMessage).last()
        await pilot.press("ctrl+g")
        await until(pilot, lambda: len(of_type(events, "end_of_turn")) == 2, what="again")
        # Only the reply's bubble was redrawn: the message above it is the same widget.
        assert app.chat.query(UserMessage).last() is message and message.is_attached
        await until(pilot, lambda: app.chat.current is None, what="the reply to end")
        second = of_type(events, "end_of_turn")[-1]
        assert second["reply"] != first["reply"]
        assert shown()[1].endswith("reply 2 of 2 · Alt+←/→")

        await pilot.press("alt+left")  # the first comes back, whole, and nothing is sampled
        await until(pilot, lambda: len(of_type(events, "end_of_turn")) == 3, what="back")
        await until(pilot, lambda: app.chat.current is None, what="the reply to end")
        back = of_type(events, "end_of_turn")[-1]
        assert back["restores"] == first["event_id"] and back["reply"] == first["reply"]
        assert shown() == (first["reply"], "brought back · reply 1 of 2 · Alt+←/→")
        assert [m.content for m in app.chat.messages if m.role == "assistant"] == [
            first["reply"]]
        await pilot.press("alt+left")
        await pilot.pause(0.1)
        assert "first reply" in str(app.chat.note_line.render())

        await pilot.press("alt+right")
        await until(pilot, lambda: len(of_type(events, "end_of_turn")) == 4, what="forward")
        await until(pilot, lambda: app.chat.current is None, what="the reply to end")
        assert of_type(events, "end_of_turn")[-1]["restores"] == second["event_id"]
        assert shown()[0] == second["reply"]

    again = make_app(data_dir=data_dir)  # a restart keeps them: the stream has them all
    events = record_events(again)
    async with again.run_test(size=SIZE) as pilot:
        assert (await booted(pilot, events))["kind"] == "warm"
        await pilot.pause(0.2)
        last = again.chat.query(AssistantMessage).last()
        assert last.text == second["reply"] and last.detail.endswith("reply 2 of 2 · Alt+←/→")
