"""Reading a long message (issue 29, item 6): progress where the reply will appear, and Esc
during the read withdraws the message (no reply bubble; the message marked withdrawn).
The fake engine reads a message starting with SLOW_READ slowly, until a cancel."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from channel_tui.app import ChannelApp
from channel_tui.export import ChatMessage
from channel_tui.options import AppOptions
from channel_tui.widgets.message_widgets import WITHDRAWN, AssistantMessage, UserMessage

from .conftest import SHARED_CACHE
from .fake_engine import SLOW_READ
from .test_read_cancel import LONG
from .test_tui_app import SIZE, until
from .test_tui_settings import fake_app, sent_requests


def reading_line(app) -> str:
    reply = app.chat.current
    return "" if reply is None else str(reply.query_one(".stop-note", Static).render())


async def test_a_long_read_shows_progress_and_esc_withdraws_the_message(tmp_path) -> None:
    app = fake_app(tmp_path)
    sent = sent_requests(app)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.chat.session_open, what="the fake boot")
        app.chat.prompt.load_text(f"{SLOW_READ} a long report")
        await pilot.press("enter")
        await until(pilot, lambda: "512 / 5,000 tokens" in reading_line(app),
                    what="the second progress report")
        line = reading_line(app)
        assert line.startswith("Reading your message · 512 / 5,000 tokens · ")
        assert "tok/s" in line and "left" in line and "Esc stops it" in line
        assert app.chat.current.has_class("reading") and app.chat.busy

        await pilot.press("escape")
        await until(pilot, lambda: not app.chat.busy, what="the withdrawal")
        assert [k for k, _ in sent].count("cancel") == 1
        users = list(app.chat.transcript.query(UserMessage))
        assert users[-1].has_class("withdrawn")
        assert "withdrawn" in str(users[-1].border_title)
        # No reply bubble after the withdrawn message: the last reply is the old one.
        children = list(app.chat.transcript.children)
        assert children.index(users[-1]) == len(children) - 1
        assert app.chat.messages[-1].stop == WITHDRAWN
        assert app.chat.messages[-2].content == f"{SLOW_READ} a long report"
        assert "withdrawn" in str(app.chat.note_line.render())

        # The next message is sent and answered as usual.
        app.chat.prompt.load_text("a short one")
        await pilot.press("enter")
        await until(pilot, lambda: app.chat.messages[-1].stop == "eot", what="the reply")
        assert isinstance(list(app.chat.transcript.children)[-1], AssistantMessage)


async def test_a_withdrawal_in_a_booted_transcript_marks_its_message(tmp_path) -> None:
    app = fake_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.chat.session_open, what="the fake boot")
        await app.chat.transcript.show([
            ChatMessage("user", "a long report"), ChatMessage("assistant", "", stop=WITHDRAWN),
            ChatMessage("user", "hello"), ChatMessage("assistant", "hi", stop="eot")])
        await pilot.pause()
        users = list(app.chat.transcript.query(UserMessage))
        assert [u.has_class("withdrawn") for u in users] == [True, False]
        assert len(app.chat.transcript.query(AssistantMessage)) == 1


@pytest.mark.real_model
async def test_esc_during_a_real_read_marks_the_message_withdrawn(
        tmp_path, real_model_path, real_model) -> None:  # real_model: builds SHARED_CACHE
    """The same on the shipped model through a real engine: progress while it reads, Esc
    stops the read part-way, the message is marked withdrawn on screen and after a restart."""
    options = dict(data_dir=tmp_path / "data", session="default", model=real_model_path,
                   cache_dir=SHARED_CACHE, max_tokens=4, debounce_s=60.0)
    app = ChannelApp(AppOptions(**options))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.chat.session_open, timeout=300, what="the boot")
        app.chat.prompt.load_text(LONG)
        await pilot.press("enter")
        await until(pilot, lambda: "Reading your message" in reading_line(app), timeout=120,
                    what="read progress")
        await pilot.press("escape")
        await until(pilot, lambda: not app.chat.busy, timeout=60, what="the withdrawal")
        users = list(app.chat.transcript.query(UserMessage))
        assert users[-1].has_class("withdrawn") and "withdrawn" in str(users[-1].border_title)
        assert app.chat.messages[-1].stop == WITHDRAWN
        assert not app.chat.query(AssistantMessage)  # no reply bubble for it

    again = ChannelApp(AppOptions(**options))
    async with again.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: again.chat.session_open, timeout=300, what="the reboot")
        await pilot.pause(0.2)
        users = list(again.chat.transcript.query(UserMessage))
        assert [u.has_class("withdrawn") for u in users] == [True]
