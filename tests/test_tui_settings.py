"""Per-session reply settings (F6), speed figures per reply and regenerate's new seed
(issue 29, items 4, 5 and 7): the settings file, the form's checks, the requests that carry
the settings, against the fake engine for the form and the REAL engine for the rest."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

from channel_tui import format as fmt
from channel_tui.app import ChannelApp
from channel_tui.options import AppOptions
from channel_tui.screens.chat_edits import regenerated_text
from channel_tui.screens.sessions import SessionListScreen
from channel_tui.screens.settings import SettingsScreen
from channel_tui.settings import (
    FIELDS,
    load_settings,
    parse_field,
    request_fields,
    save_settings,
    summary,
)
from channel_tui.widgets.message_widgets import AssistantMessage

from .test_tui_app import SIZE, booted, make_app, of_type, on_screen, record_events, say, until

__all__ = ["make_app"]  # the fixture, shared with test_tui_app
FAKE_ENGINE = Path(__file__).resolve().parent / "fake_engine.py"
SPEC = {f.name: f for f in FIELDS}


def fake_app(data_dir: Path) -> ChannelApp:
    return ChannelApp(AppOptions(data_dir=data_dir, session="default",
                                 engine_command=[sys.executable, str(FAKE_ENGINE)]))


def sent_requests(app: ChannelApp) -> list[tuple[str, dict]]:
    """Every request the app writes to the engine, as (type, fields)."""
    sent: list[tuple[str, dict]] = []
    original = app.link.send

    def spy(kind: str, on_event=None, **fields):
        sent.append((kind, fields))
        return original(kind, on_event, **fields)

    app.link.send = spy  # type: ignore[method-assign]
    return sent


# -- the settings file and its checks -----------------------------------------------------------
def test_a_field_is_checked_with_the_engine_ranges_and_empty_is_the_default() -> None:
    assert parse_field(SPEC["temperature"], "") == (None, None)
    assert parse_field(SPEC["temperature"], " 0.7 ") == (0.7, None)
    assert parse_field(SPEC["temperature"], "0") == (0.0, None)  # greedy
    value, problem = parse_field(SPEC["temperature"], "500")
    assert value is None and problem is not None and "temperature must be" in problem
    assert "top_p must be in (0, 1]" in parse_field(SPEC["top_p"], "1.5")[1]
    assert "must be a number" in parse_field(SPEC["min_p"], "lots")[1]
    assert "must be from 0 to 65536" in parse_field(SPEC["max_tokens"], "70000")[1]
    assert "whole number" in parse_field(SPEC["max_tokens"], "2.5")[1]
    assert parse_field(SPEC["repeat_penalty"], "1.1") == (1.1, None)


def test_settings_are_saved_private_and_atomically_and_read_back(tmp_path) -> None:
    path = save_settings(tmp_path, "s", {"temperature": 0.7, "max_tokens": 64})
    assert path == tmp_path / "s.settings.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"temperature": 0.7, "max_tokens": 64}
    assert [p.name for p in tmp_path.iterdir()] == ["s.settings.json"]  # no temporary left
    assert load_settings(tmp_path, "s") == ({"temperature": 0.7, "max_tokens": 64}, [])
    assert load_settings(tmp_path, "none-saved") == ({}, [])


def test_a_bad_settings_file_loses_only_its_bad_values(tmp_path) -> None:
    (tmp_path / "s.settings.json").write_text(
        '{"temperature": 1, "top_p": 7, "max_tokens": true, "unknown": 3}')
    settings, problems = load_settings(tmp_path, "s")
    assert settings == {"temperature": 1.0}
    assert len(problems) == 2 and any("top_p" in p for p in problems)
    (tmp_path / "t.settings.json").write_text("{not json")
    settings, problems = load_settings(tmp_path, "t")
    assert settings == {} and "not readable JSON" in problems[0]


def test_summary_and_the_fields_a_turn_carries() -> None:
    assert summary({}) == "model defaults"
    assert summary({"temperature": 0.7, "top_p": 0.9}) == "t 0.7 · top-p 0.9"
    assert summary({"max_tokens": 256, "repeat_penalty": 1.1}) == "rep 1.1 · max 256"
    # The session's settings lie over the app's options (the command line's).
    assert request_fields({"temperature": 0.5}, {"temperature": 0.0, "seed": 3}, 512) == {
        "max_tokens": 512, "temperature": 0.5, "seed": 3}


def test_reply_figures_and_regenerate_words() -> None:
    assert fmt.reply_stats({"decode_tokens": 7, "ttft_ms": 52.0, "prefill_tok_s": 250.0,
                            "decode_tok_s": 42.0}) == \
        "7 tokens · first token 52 ms · prompt 250 tok/s · reply 42.0 tok/s"
    # A boot transcript's reply has no count; a regenerate reads no prompt.
    assert fmt.reply_stats({"ttft_ms": 9.0, "prefill_tok_s": 0.0, "decode_tok_s": 80.0}) == \
        "first token 9.0 ms · reply 80.0 tok/s"
    assert fmt.reply_stats({"role": "user"}) == ""
    assert regenerated_text(42, 7) == "Regenerated with a new seed, 42 (was 7)"
    assert "same seed" in regenerated_text(5, 5)
    assert "greedily" in regenerated_text(None, None)


# -- the settings screen (fake engine: the form's behaviour only) --------------------------------
async def test_the_settings_screen_checks_saves_and_the_next_turn_carries_them(tmp_path) -> None:
    app = fake_app(tmp_path)
    sent = sent_requests(app)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app.chat.messages) == 3, what="the fake boot")
        await pilot.press("f6")
        await until(pilot, lambda: on_screen(app, SettingsScreen), what="F6")
        screen = app.screen
        await pilot.click("#set-temperature")
        await pilot.press(*"500", "enter")  # out of range: refused, said under the input
        await pilot.pause(0.1)
        assert app.screen is screen
        error = screen.query_one("#set-temperature-error")
        assert error.display and "temperature must be" in str(error.render())
        await pilot.press("backspace", "backspace", "backspace", *"0.7")
        await pilot.click("#set-top_p")
        await pilot.press(*"0.9", "enter")
        await until(pilot, lambda: app.screen is app.chat, what="the screen to close")
        assert not error.display
        assert app.chat.settings == {"temperature": 0.7, "top_p": 0.9}
        saved = tmp_path / "default.settings.json"
        assert json.loads(saved.read_text()) == {"temperature": 0.7, "top_p": 0.9}
        assert stat.S_IMODE(os.stat(saved).st_mode) == 0o600

        app.chat.prompt.load_text("hello")
        await pilot.press("enter")
        await until(pilot, lambda: len(app.chat.messages) == 5, what="the fake reply")
        turn = [fields for kind, fields in sent if kind == "turn"][-1]
        assert turn["temperature"] == 0.7 and turn["top_p"] == 0.9
        assert turn["max_tokens"] == 512 and "min_p" not in turn  # left to the model
        # The reply shows its speed figures, the one from the boot transcript too.
        details = [w.detail for w in app.chat.query(AssistantMessage)]
        assert details == ["first token 61 ms · prompt 310 tok/s · reply 44.5 tok/s",
                           "7 tokens · first token 52 ms · prompt 250 tok/s · reply 42.0 tok/s"]

        await pilot.press("ctrl+o")  # the session list shows them in brief
        await until(pilot, lambda: on_screen(app, SessionListScreen), what="list")
        await pilot.pause(0.1)
        assert [s.settings for s in app.screen.sessions] == ["t 0.7 · top-p 0.9"]
        await pilot.press("escape")

        await pilot.press("f6")  # Ctrl+R clears them all: the model's defaults again
        await until(pilot, lambda: on_screen(app, SettingsScreen), what="F6")
        assert app.screen.query_one("#set-temperature").value == "0.7"
        await pilot.press("ctrl+r", "enter")
        await until(pilot, lambda: app.screen is app.chat, what="the screen to close")
        assert app.chat.settings == {} and json.loads(saved.read_text()) == {}


async def test_esc_leaves_the_settings_as_they_were(tmp_path) -> None:
    save_settings(tmp_path, "default", {"min_p": 0.05})
    app = fake_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app.chat.messages) == 3, what="the fake boot")
        assert app.chat.settings == {"min_p": 0.05}  # read when the session opened
        await pilot.press("f6")
        await until(pilot, lambda: on_screen(app, SettingsScreen), what="F6")
        await pilot.press("ctrl+r", "escape")
        await until(pilot, lambda: app.screen is app.chat, what="the screen to close")
        assert app.chat.settings == {"min_p": 0.05}
        assert load_settings(tmp_path, "default") == ({"min_p": 0.05}, [])


# -- the real engine ---------------------------------------------------------------------------
async def test_real_engine_turns_take_the_session_settings_and_regenerate_draws_a_new_seed(
        make_app, tmp_path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    save_settings(data_dir, "default", {"temperature": 0.9, "top_p": 0.95, "max_tokens": 6})
    app = make_app(data_dir=data_dir)  # the app's own max_tokens (24) is overridden: 6
    events = record_events(app)
    notes: list[str] = []
    app.chat.notify = lambda message, **kw: notes.append(message)  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot, events)
        first = await say(pilot, app, "tell me something", events)
        assert first["decode_tokens"] <= 6
        assert isinstance(first.get("seed"), int)  # sampled: temperature 0.9
        assert first.get("ttft_ms", 0) > 0 and first.get("prefill_tok_s", 0) > 0
        shown = app.chat.query(AssistantMessage).last().detail
        assert "first token" in shown and "prompt" in shown and "reply" in shown

        await pilot.press("ctrl+g")
        await until(pilot, lambda: len(of_type(events, "end_of_turn")) == 2, what="again")
        await until(pilot, lambda: any("Regenerated" in n for n in notes), what="the note")
        again = of_type(events, "end_of_turn")[-1]
        assert of_type(events, "undone")[-1]["previous_seed"] == first["seed"]
        assert again["seed"] != first["seed"] and again["decode_tokens"] <= 6
        assert f"Regenerated with a new seed, {again['seed']} (was {first['seed']})" in notes
