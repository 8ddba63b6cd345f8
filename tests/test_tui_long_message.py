"""A message larger than the ring (issue 29, item 6): warned about in plain words before it
is sent, then sent anyway or taken back to edit. The fake engine's ring has 512 slots."""

from __future__ import annotations

from channel_tui.screens.long_message import (
    LongMessageScreen,
    estimated_tokens,
    too_long,
    warning_text,
)

from .test_tui_app import SIZE, on_screen, until
from .test_tui_settings import fake_app, sent_requests


def test_the_estimate_and_its_words() -> None:
    assert estimated_tokens("abcd") == 1 and estimated_tokens("abcde") == 2
    assert not too_long("x" * 2048, 512) and too_long("x" * 2049, 512)
    assert not too_long("x" * 100_000, None)  # no ring size known yet: nothing to say
    text = warning_text("x" * 23_200, 4096)
    assert text.startswith("This message is about 5,800 tokens (an estimate: 23,200 "
                           "characters); the model keeps 4,096.")
    assert "will be forgotten" in text


async def test_a_message_larger_than_the_ring_is_warned_about_first(tmp_path) -> None:
    app = fake_app(tmp_path)
    sent = sent_requests(app)
    long_text = "word " * 600  # about 750 tokens by the estimate; the ring holds 512
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.chat.session_open, what="the fake boot")
        assert app.chat.ring_slots == 512
        app.chat.prompt.load_text(long_text)
        await pilot.press("enter")
        await until(pilot, lambda: on_screen(app, LongMessageScreen), what="warning")
        shown = str(app.screen.query_one("#long-text").render())
        assert "about 750 tokens" in shown and "the model keeps 512" in shown
        await pilot.press("escape")  # back to edit it: nothing sent, the text kept
        await until(pilot, lambda: app.screen is app.chat, what="the dialog to close")
        assert not [k for k, _ in sent if k == "turn"]
        assert app.chat.prompt.text == long_text

        await pilot.press("enter")
        await until(pilot, lambda: on_screen(app, LongMessageScreen), what="warning")
        await pilot.press("enter")  # send it anyway
        await until(pilot, lambda: len(app.chat.messages) == 5, what="the fake reply")
        assert [f["text"] for k, f in sent if k == "turn"] == [long_text.strip()]
        assert app.chat.prompt.text == ""

        app.chat.prompt.load_text("a short one")  # no warning for an ordinary message
        await pilot.press("enter")
        await until(pilot, lambda: len(app.chat.messages) == 7, what="the second reply")
        assert not isinstance(app.screen, LongMessageScreen)
