"""Moving about the conversation and copying out of it (issue 30, items 1 and 2): keyboard
scrolling, message focus with ↑/↓, copying a message, a code block, a selection (Ctrl+C, which
quits only when nothing is selected), toasts that say where a copy went, and replies drawn
with their own line breaks. The REAL engine on the tiny model."""

from __future__ import annotations

from textual.widgets.markdown import MarkdownBlock

from channel_tui.clipboard import COPY_FILE, clipboard_commands, copy_text
from channel_tui.export import ChatMessage
from channel_tui.widgets.message_widgets import AssistantMessage, UserMessage
from channel_tui.widgets.prompt import Prompt
from channel_tui.widgets.reply_markdown import CodeBlock

from .test_tui_app import SIZE, booted, make_app, record_events, say, until

__all__ = ["make_app"]  # the fixture, shared with test_tui_app


def test_a_copy_says_where_it_went(tmp_path) -> None:
    sent: list[str] = []
    # No desktop clipboard here: the terminal's (unconfirmed) and a file, named in the toast.
    result = copy_text(sent.append, "héllo", "the reply", tmp_path, env={})
    assert sent == ["héllo"] and not result.confirmed
    assert str(tmp_path / COPY_FILE) in result.message and "5 characters" in result.message
    assert (tmp_path / COPY_FILE).read_text(encoding="utf-8") == "héllo"
    assert (tmp_path / COPY_FILE).stat().st_mode & 0o777 == 0o600
    # A directory that refuses the file: still one line, and honest about it.
    gone = copy_text(sent.append, "x", "the reply", tmp_path / "missing", env={})
    assert "no copy could be saved" in gone.message and "\n" not in gone.message
    assert clipboard_commands({}, platform="linux") == []


async def test_keys_scroll_focus_and_copy_messages(make_app, tmp_path) -> None:
    app = make_app()
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot, events)
        for n in range(4):  # more than a screenful
            await say(pilot, app, f"message {n}", events)
        transcript = app.chat.transcript
        await pilot.pause(0.2)
        bottom = transcript.max_scroll_y
        assert bottom > 0 and transcript.scroll_y == bottom
        await pilot.press("pageup")
        await pilot.pause(0.1)
        assert transcript.scroll_y < bottom
        await pilot.press("ctrl+home")
        await pilot.pause(0.1)
        assert transcript.scroll_y == 0
        await pilot.press("ctrl+end")
        await pilot.pause(0.1)
        assert transcript.scroll_y == transcript.max_scroll_y

        await pilot.press("up")  # from the empty prompt: the newest message
        assert isinstance(app.focused, AssistantMessage)
        await pilot.press("up")
        assert isinstance(app.focused, UserMessage) and app.focused.text == "message 3"
        await pilot.press("c")
        await pilot.pause(0.1)
        assert app.clipboard == "message 3"
        copied = (tmp_path / "data" / COPY_FILE).read_text(encoding="utf-8")
        assert copied == "message 3"
        await pilot.press("down", "down")  # past the newest: back to the prompt
        assert isinstance(app.focused, Prompt)
        await pilot.press("up", "escape")  # Esc from a message: back to the prompt too
        assert isinstance(app.focused, Prompt) and app.is_running

        await pilot.press("ctrl+t")
        await pilot.pause(0.1)
        assert app.clipboard == app.chat.messages[-1].content

        # Ctrl+C with a selection copies it and the app goes on; with none, it quits.
        app.chat.prompt.load_text("copy me")
        app.chat.prompt.select_all()
        await pilot.press("ctrl+c")
        await pilot.pause(0.1)
        assert app.clipboard == "copy me" and app.is_running
        app.chat.prompt.load_text("")
        await pilot.press("ctrl+c")
        await until(pilot, lambda: not app.is_running, what="the quit")


async def test_a_code_block_is_labelled_and_copied_by_a_click(make_app, tmp_path) -> None:
    app = make_app()
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot, events)
        await app.chat.transcript.show([
            ChatMessage("user", "how?"),
            ChatMessage("assistant", "Like this:\n```python\nitems.reverse()\n```\nA leaf falls\n"
                                     "a second leaf\nthe third", stop="eot")])
        await pilot.pause(0.2)
        block = app.chat.query_one(CodeBlock)
        assert block.border_title == "python" and block.border_subtitle == "click to copy"
        await pilot.click(CodeBlock)
        await pilot.pause(0.1)
        assert app.clipboard == "items.reverse()"
        # The model's single line breaks stay line breaks (a haiku keeps its three lines).
        reply = app.chat.query(AssistantMessage).last()
        paragraphs = [str(b.content) for b in reply.query(MarkdownBlock)
                      if type(b).__name__ == "MarkdownParagraph"]
        assert "A leaf falls\na second leaf\nthe third" in paragraphs
