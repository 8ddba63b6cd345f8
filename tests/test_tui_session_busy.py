"""Issue 31, defect 1, in the app: a session another Channel holds is refused in one line,
and the app offers to open a fork of it or another session, or to quit
(channel_tui/screens/session_busy.py). With tests/fake_engine.py's --busy, then against a real
engine holding the session."""

from __future__ import annotations

import shutil

import pytest

from channel_tui.app import ChannelApp
from channel_tui.options import AppOptions
from channel_tui.screens.new_session import NewSessionScreen
from channel_tui.screens.session_busy import SessionBusyScreen
from channel_tui.screens.sessions import SessionListScreen

from .fake_engine import HOLDER_PID
from .test_tui_app import on_screen as screen_ready
from .test_tui_e2e import CHANNEL, Tmux, _quote
from .test_tui_snapshots import SIZE, fake_app, until

REFUSAL = f"session 'default' is open in another Channel (pid {HOLDER_PID})"


def on_screen(app: ChannelApp, kind: type, widget: str = "") -> bool:
    """test_tui_app.on_screen, and where named, `widget` composed in it."""
    return screen_ready(app, kind) and (not widget or bool(app.screen.query(widget)))


def banner(app: ChannelApp) -> str:
    return str(app.chat.query_one("#boot-line").render())


async def test_a_busy_session_offers_a_fork_or_another_session(tmp_path) -> None:
    app = fake_app(tmp_path / "data", "--busy", "default")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: on_screen(app, SessionBusyScreen, "#busy-message"))
        shown = str(app.screen.query_one("#busy-message").render())
        assert shown == REFUSAL and banner(app) == f"⚠ {REFUSAL}"
        assert not app.chat.session_open and not app.chat.fatal
        await pilot.press("o")  # the session list; going back asks again
        await until(pilot, lambda: on_screen(app, SessionListScreen))
        await pilot.press("escape")
        await until(pilot, lambda: on_screen(app, SessionBusyScreen))
        await pilot.press("f")
        await until(pilot, lambda: on_screen(app, NewSessionScreen, "#new-name"))
        assert app.screen.query_one("#new-name").value == "default-fork"
        await pilot.press("enter")
        await until(pilot, lambda: app.chat.session_open)
        assert app.chat.session == "default-fork" and len(app.chat.messages) == 3
        assert not on_screen(app, SessionBusyScreen)
        assert "Forked 'default' as 'default-fork'" in " ".join(
            str(n.message) for n in app._notifications)


async def test_quitting_from_a_busy_session_says_why_on_exit(tmp_path) -> None:
    app = fake_app(tmp_path / "data", "--busy", "default")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: on_screen(app, SessionBusyScreen))
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running)
    assert app.return_code == 2 and app.chat.fatal_message == REFUSAL


async def test_a_session_a_real_engine_holds_is_forked_from_the_app(engine, tmp_path, tiny_gguf,
                                                                   tiny_cache) -> None:
    data = tmp_path / "data"
    holder = engine(data_dir=data)
    holder.request({"type": "open", "session": "default"}, "booted")
    holder.request({"type": "turn", "session": "default", "text": "held elsewhere",
                    "max_tokens": 4}, "end_of_turn")
    app = ChannelApp(AppOptions(data_dir=data, model=tiny_gguf, cache_dir=tiny_cache,
                                max_tokens=4, debounce_s=60.0))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: on_screen(app, SessionBusyScreen, "#busy-message"),
                    timeout=60)
        assert str(app.screen.query_one("#busy-message").render()) == (
            f"session 'default' is open in another Channel (pid {holder.proc.pid})")
        await pilot.press("f")
        await until(pilot, lambda: on_screen(app, NewSessionScreen))
        await pilot.press("enter")
        await until(pilot, lambda: app.chat.session_open, timeout=60)
        assert app.chat.session == "default-fork"
        assert [m.content for m in app.chat.messages if m.role == "user"] == ["held elsewhere"]
        await pilot.press("ctrl+q")
        await until(pilot, lambda: not app.is_running, timeout=60)
    assert app.return_code == 0
    # The holder never noticed: its session is still its own, and answers.
    end = holder.request({"type": "turn", "session": "default", "text": "still mine",
                          "max_tokens": 4}, "end_of_turn")
    assert end["type"] == "end_of_turn"


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_two_apps_on_one_session_in_real_terminals(tmp_path, tiny_gguf, tiny_cache) -> None:
    """The second app is refused in one line; quitting there says it again on the terminal."""
    app = (f"{_quote(str(CHANNEL))} --data-dir {_quote(str(tmp_path / 'data'))} "
           f"--cache-dir {_quote(str(tiny_cache))} --model {_quote(str(tiny_gguf))}")
    first = Tmux(["sh", "-c", app])
    second = None
    try:
        first.wait_for("Cold boot · a new conversation", timeout=60)
        second = Tmux(["sh", "-c", f"{app}; echo exit status $?; sleep 60"])
        second.wait_for("Session in use", timeout=60)
        assert "session 'default' is open in another Channel (pid" in second.screen()
        second.keys("q")
        screen = second.wait_for("exit status 2", timeout=60)
        assert "channel: error: session 'default' is open in another Channel (pid" in screen
        assert "Traceback" not in screen
        assert first.alive() and "Cold boot · a new conversation" in first.screen()
    finally:
        first.kill()
        if second is not None:
            second.kill()
