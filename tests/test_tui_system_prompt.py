"""The system prompt in the app (issue 29, item 5): F6 shows the session's own; a changed one
is explained and goes to a fork (replayed under it) or to new sessions; Ctrl+N shows and keeps
the prompt new sessions start from. The REAL engine on the tiny model, real files."""

from __future__ import annotations

import json

from channel_tui.screens.new_session import NewSessionScreen
from channel_tui.screens.settings import SettingsScreen
from channel_tui.screens.system_prompt import SystemPromptScreen, explanation
from channel_tui.system_prompt import load_new_session_prompt, save_new_session_prompt
from engine.session.fork import system_prompt
from engine.session.stream import StreamLog

from .test_tui_app import SIZE, booted, make_app, of_type, on_screen, record_events, say, until

__all__ = ["make_app"]  # the fixture, shared with test_tui_app
TEMPLATE_OWN = "You are a tiny test model."  # tests/tiny_model.py's CHATML
NEW = "You answer in one short sentence."


def first_prompt(data_dir, name: str) -> str | None:
    return system_prompt(StreamLog(data_dir / f"{name}.stream.jsonl").read().events)


async def submit_system_prompt(pilot, app, value: str) -> None:
    """F6, the system prompt field set to `value`, then Enter."""
    await pilot.press("f6")
    await until(pilot, lambda: on_screen(app, SettingsScreen), what="F6")
    app.screen.query_one("#set-system").value = value
    await pilot.click("#set-system")
    await pilot.press("enter")


def test_the_new_session_prompt_file_and_its_checks(tmp_path) -> None:
    assert load_new_session_prompt(tmp_path) == ("", None)  # none kept: the model's own
    save_new_session_prompt(tmp_path, NEW)
    assert load_new_session_prompt(tmp_path) == (NEW, None)
    (tmp_path / "new-session.json").write_text('{"system_prompt": 3}')
    prompt, problem = load_new_session_prompt(tmp_path)
    assert prompt == "" and "not a text" in problem
    (tmp_path / "new-session.json").write_text("{torn")
    assert "not readable JSON" in load_new_session_prompt(tmp_path)[1]
    try:
        save_new_session_prompt(tmp_path, "x" * (65 << 10))
    except ValueError as exc:
        assert "system prompt" in str(exc) and "bytes" in str(exc)
    else:
        raise AssertionError("a prompt over the message limit was kept")
    assert "2 messages are read again" in explanation("s", 2)
    assert "nothing is read again" in explanation("s", 0)


async def test_a_changed_prompt_forks_the_session_and_replays_under_it(make_app,
                                                                        tmp_path) -> None:
    data_dir = tmp_path / "data"
    app = make_app()
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot, events)
        await say(pilot, app, "remember teal", events)
        await pilot.press("f6")
        await until(pilot, lambda: on_screen(app, SettingsScreen), what="F6")
        # The session's own, as its transcript has it.
        assert app.screen.query_one("#set-system").value == TEMPLATE_OWN
        await pilot.press("escape")
        await submit_system_prompt(pilot, app, NEW)
        await until(pilot, lambda: on_screen(app, SystemPromptScreen), what="why")
        assert "2 messages are read again" in str(app.screen.query_one("#system-why").render())
        await pilot.press("f")
        await until(pilot, lambda: on_screen(app, NewSessionScreen), what="its name")
        assert app.screen.query_one("#new-name").value == "default-fork"
        await pilot.press("enter")
        await booted(pilot, events, count=2)
        fork = of_type(events, "booted")[1]
        assert fork["session"] == "default-fork" and fork["kind"] == "cold", fork
        assert of_type(events, "forked")[-1]["system_changed"] is True
        assert app.chat.session == "default-fork" and app.chat.system_prompt() == NEW
        assert [m.content for m in app.chat.messages if m.role == "user"] == ["remember teal"]
        await say(pilot, app, "which colour?", events)  # the fork answers under it
    assert first_prompt(data_dir, "default") == TEMPLATE_OWN  # the source is untouched
    assert first_prompt(data_dir, "default-fork") == NEW


async def test_a_changed_prompt_kept_for_new_sessions_starts_the_next_one(make_app,
                                                                          tmp_path) -> None:
    data_dir = tmp_path / "data"
    app = make_app()
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot, events)
        await submit_system_prompt(pilot, app, NEW)
        await until(pilot, lambda: on_screen(app, SystemPromptScreen), what="why")
        await pilot.press("n")
        await until(pilot, lambda: app.screen is app.chat, what="back to the chat")
        assert json.loads((data_dir / "new-session.json").read_text()) == {
            "system_prompt": NEW}
        assert app.chat.system_prompt() == TEMPLATE_OWN  # this session keeps its own

        await pilot.press("ctrl+n")  # the next session shows it, and starts from it
        await until(pilot, lambda: on_screen(app, NewSessionScreen), what="Ctrl+N")
        assert app.screen.query_one("#new-system").value == NEW
        # The dialog says which model the new session will run on.
        assert "tiny-test-llama" in str(app.screen.query_one("#new-model").render())
        await pilot.press("enter")
        await booted(pilot, events, count=2)
        assert app.chat.system_prompt() == NEW
        # Reopening it asks for nothing: an existing session keeps what it has, unwarned.
        assert not of_type(events, "warning")
    assert first_prompt(data_dir, app.chat.session) == NEW


async def test_esc_keeps_the_prompt_and_a_blank_one_is_no_change(make_app, tmp_path) -> None:
    data_dir = tmp_path / "data"
    app = make_app()
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot, events)
        for value, expect_dialog in ((NEW, True), ("", False)):
            await submit_system_prompt(pilot, app, value)
            if expect_dialog:
                await until(pilot, lambda: on_screen(app, SystemPromptScreen),
                            what="why")
                await pilot.press("escape")
            await until(pilot, lambda: app.screen is app.chat, what="back to the chat")
        assert not of_type(events, "forked")
        assert not (data_dir / "new-session.json").exists()
        assert app.chat.system_prompt() == TEMPLATE_OWN
