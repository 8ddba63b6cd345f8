"""Issue 30, item 3: the app's preferences (preferences.json in the config directory) keep
the theme and the last session used; `channel` without --session returns to it. The file's
checks, then pilot tests: the REAL engine for the relaunch, the fake one for the warnings."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

from channel_cli.app_command import app_options
from channel_cli.cli import build_parser
from channel_tui.app import ChannelApp
from channel_tui.options import AppOptions
from channel_tui.preferences import Preferences, load_preferences, save_preferences
from channel_tui.screens.new_session import NewSessionScreen
from engine.session.manage import delete_session

from .test_tui_app import SIZE, booted, make_app, record_events, until

__all__ = ["make_app"]  # the fixture, shared with test_tui_app
FAKE_ENGINE = Path(__file__).resolve().parent / "fake_engine.py"


def test_preferences_are_saved_privately_and_read_back(tmp_path) -> None:
    config = tmp_path / "config"
    prefs = Preferences(theme="nord")
    assert prefs.remember_session(tmp_path / "data", "work")
    assert not prefs.remember_session(tmp_path / "data", "work")  # nothing new to write
    path = save_preferences(config, prefs)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(config.stat().st_mode) == 0o700
    assert [p.name for p in config.iterdir()] == ["preferences.json"]  # no temporary left
    loaded, problems = load_preferences(config)
    assert problems == [] and loaded.theme == "nord"
    assert loaded.last_session_in(tmp_path / "data") == "work"
    assert loaded.last_session_in(tmp_path / "elsewhere") is None
    assert load_preferences(tmp_path / "none") == (Preferences(), [])


def test_a_bad_preferences_file_loses_only_its_bad_values(tmp_path) -> None:
    (tmp_path / "preferences.json").write_text(json.dumps(
        {"theme": 7, "last_session": {"/a": "ok", "/b": "../bad"}, "future": [1]}))
    prefs, problems = load_preferences(tmp_path)
    assert prefs.theme is None and prefs.last_session == {"/a": "ok"}
    assert problems == ["preferences.json: theme must be a theme's name, got 7",
                        "preferences.json: last_session for /b: not a session name, '../bad'"]
    save_preferences(tmp_path, prefs)  # a key of a newer version is kept
    assert json.loads((tmp_path / "preferences.json").read_text())["future"] == [1]
    (tmp_path / "preferences.json").write_text("{broken")
    prefs, problems = load_preferences(tmp_path)
    assert prefs == Preferences() and len(problems) == 1 and "not readable JSON" in problems[0]


def test_the_command_line_leaves_the_session_to_the_app_unless_given(tmp_path) -> None:
    plain = app_options(build_parser().parse_args(["--data-dir", str(tmp_path)]))
    assert plain.session is None and plain.config_dir is None
    given = app_options(build_parser().parse_args(
        ["--session", "x", "--config-dir", str(tmp_path / "c")]))
    assert given.session == "x" and given.config_dir == tmp_path / "c"


async def test_relaunch_returns_to_the_last_session_and_the_theme(make_app, tmp_path):
    config, data = tmp_path / "config", tmp_path / "data"
    first = make_app()  # no session given: the default, the first time
    events = record_events(first)
    async with first.run_test(size=SIZE) as pilot:
        assert (await booted(pilot, events))["session"] == "default"
        await pilot.press("ctrl+n")
        await until(pilot, lambda: isinstance(first.screen, NewSessionScreen), what="Ctrl+N")
        first.screen.query_one("#new-name").value = "alpha"
        await pilot.press("enter")
        assert (await booted(pilot, events, 2))["session"] == "alpha"
        first.theme = "nord"  # as the palette's "Change theme" does
        await pilot.pause(0.1)
        await pilot.press("ctrl+q")
        await until(pilot, lambda: not first.is_running, what="exit")
    saved = json.loads((config / "preferences.json").read_text())
    assert saved == {"theme": "nord", "last_session": {str(data.resolve()): "alpha"}}

    again = make_app()
    events = record_events(again)
    async with again.run_test(size=SIZE) as pilot:
        opened = await booted(pilot, events)
        assert opened["session"] == "alpha" and again.chat.session == "alpha"
        assert again.theme == "nord"
        await pilot.press("ctrl+q")
        await until(pilot, lambda: not again.is_running, what="exit")

    delete_session(data, "alpha")  # gone since: the default again
    assert make_app().chat.session == "default"
    assert make_app(session="other").chat.session == "other"  # --session wins


async def test_bad_preferences_are_said_in_one_line_each_and_the_rest_kept(tmp_path):
    config = tmp_path / "config"
    config.mkdir()
    (config / "preferences.json").write_text(json.dumps(
        {"theme": "no-such-theme", "last_session": {str(tmp_path): 3}}))
    app = ChannelApp(AppOptions(data_dir=tmp_path / "data", config_dir=config,
                                engine_command=[sys.executable, str(FAKE_ENGINE)]))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app.chat.messages) == 3, what="the fake boot")
        shown = [str(n.message) for n in app._notifications]
        assert shown == [
            f"Preferences: preferences.json: last_session for {tmp_path}: not a session "
            f"name, 3",
            "Preferences: theme 'no-such-theme' is not one of the app's themes; using the "
            "default"]
        assert app.theme == "textual-dark" and app.chat.session == "default"
