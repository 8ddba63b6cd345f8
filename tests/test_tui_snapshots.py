"""SVG snapshots of the app's screens (pytest-textual-snapshot).

These use tests/fake_engine.py, a narrow stand-in speaking the protocol with constant timings,
ids and ring cells, so that the pictures are deterministic. Behaviour is tested against the
real engine in test_tui_app.py. Update the pictures with `pytest --snapshot-update`.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from channel_tui.app import ChannelApp
from channel_tui.options import AppOptions
from channel_tui.widgets.prompt import Prompt

FAKE_ENGINE = Path(__file__).resolve().parent / "fake_engine.py"
SIZE = (100, 32)


def fake_app(data_dir: Path, *engine_flags: str) -> ChannelApp:
    return ChannelApp(AppOptions(data_dir=data_dir, session="default",
                                 engine_command=[sys.executable, str(FAKE_ENGINE),
                                                 *engine_flags]))


async def until(pilot, predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "the fake engine did not answer in time"
        await pilot.pause(0.05)


async def booted(pilot) -> None:
    app: ChannelApp = pilot.app
    await until(pilot, lambda: len(app.chat.messages) == 3)
    app.chat.query_one(Prompt).cursor_blink = False  # a blinking cursor is not deterministic
    await pilot.pause(0.1)


async def one_turn(pilot) -> None:
    await booted(pilot)
    app: ChannelApp = pilot.app
    app.chat.query_one(Prompt).load_text("And how does a warm boot work?")
    await pilot.press("enter")
    await until(pilot, lambda: len(app.chat.messages) == 5 and app.chat.current is None)
    await pilot.pause(0.2)


def test_main_screen(snap_compare, tmp_path) -> None:
    """Warm boot banner, transcript with Markdown, a streamed reply, status bar, footer."""
    assert snap_compare(fake_app(tmp_path), terminal_size=SIZE, run_before=one_turn)


def test_main_screen_at_80_by_24(snap_compare, tmp_path) -> None:
    """The smallest terminal people use: one status line, the essential keys in the footer,
    the banner down to one line after the first turn, the conversation still readable."""
    assert snap_compare(fake_app(tmp_path), terminal_size=(80, 24), run_before=one_turn)


def test_main_screen_at_140_by_45(snap_compare, tmp_path) -> None:
    assert snap_compare(fake_app(tmp_path), terminal_size=(140, 45), run_before=one_turn)


def test_cold_boot_banner(snap_compare, tmp_path) -> None:
    assert snap_compare(fake_app(tmp_path, "--cold-boot"), terminal_size=SIZE,
                        run_before=booted)


def test_help_screen(snap_compare, tmp_path) -> None:
    assert snap_compare(fake_app(tmp_path), terminal_size=SIZE, run_before=booted,
                        press=["f1"])


def test_ring_view(snap_compare, tmp_path) -> None:
    assert snap_compare(fake_app(tmp_path), terminal_size=SIZE, run_before=one_turn,
                        press=["f2"])


def test_session_list(snap_compare, tmp_path) -> None:
    then = time.time() - 200  # "3 min ago" while the picture is taken
    for name, lines, snap_bytes in (("default", 3, 6_912_000), ("travel-plans", 2, 0),
                                    ("notes", 4, 1_500_000)):
        stream = tmp_path / f"{name}.stream.jsonl"
        records = [f'{{"id":"01JDZ{i:021d}","role":"{role}","content":"{name} message {i}",'
                   f'"ts":"2026-11-29T10:00:00.000Z"}}'
                   for i, role in enumerate(["system", "user", "assistant", "user"][:lines])]
        stream.write_text("\n".join(records) + "\n")
        os.utime(stream, (then, then))
        if snap_bytes:
            snap = tmp_path / f"{name}.snapshot.bin"
            snap.write_bytes(b"\0" * snap_bytes)
            os.utime(snap, (then, then))
    (tmp_path / "notes.settings.json").write_text('{"temperature": 0.7, "top_p": 0.9}')
    assert snap_compare(fake_app(tmp_path), terminal_size=SIZE, run_before=booted,
                        press=["ctrl+o"])


def test_settings_screen(snap_compare, tmp_path) -> None:
    """F6 with one setting saved and one typed out of range: its error is shown under it."""
    (tmp_path / "default.settings.json").write_text('{"temperature": 0.7}')

    async def typed(pilot) -> None:
        await booted(pilot)
        await pilot.press("f6")
        await pilot.pause(0.1)
        await pilot.click("#set-top_p")
        await pilot.press("1", ".", "5")
        await pilot.pause(0.1)
        for widget in pilot.app.screen.query("Input"):
            widget.cursor_blink = False
        await pilot.pause(0.1)

    assert snap_compare(fake_app(tmp_path), terminal_size=SIZE, run_before=typed)


def test_boot_comparison(snap_compare, tmp_path) -> None:
    async def compare(pilot) -> None:
        await booted(pilot)
        await pilot.press("f7")
        await until(pilot, lambda: getattr(pilot.app.screen, "result", None) is not None)
        await pilot.pause(0.1)

    assert snap_compare(fake_app(tmp_path), terminal_size=SIZE, run_before=compare)


def test_the_readme_screenshot_is_a_default_first_run() -> None:
    """docs/screenshot.svg (the README's first picture) comes from scripts/readme_screenshot.py:
    the shipped model, a new data directory, default settings, one everyday question."""
    shot = (Path(__file__).resolve().parent.parent / "docs" / "screenshot.svg").read_text()
    words = shot.replace("&#160;", " ")
    for seen in ("What", "capital", "France", "SmolLM2", "a new conversation"):
        assert seen in words, seen


def test_turns_screen_at_80_by_24(snap_compare, tmp_path) -> None:
    """F9 after three turns: turn 0, the three turns newest at the bottom, the current one
    marked and greyed, the one before it highlighted."""
    async def three_turns(pilot) -> None:
        await booted(pilot)
        app: ChannelApp = pilot.app
        for n, text in enumerate(("And a tuple?", "Why is that?\nAnd a second line")):
            app.chat.query_one(Prompt).load_text(text)
            await pilot.press("enter")
            await until(pilot, lambda n=n: len(app.chat.messages) == 5 + 2 * n
                        and app.chat.current is None)
        await pilot.press("f9")
        await until(pilot, lambda: type(app.screen).__name__ == "TurnsScreen")
        await pilot.pause(0.2)

    assert snap_compare(fake_app(tmp_path), terminal_size=(80, 24), run_before=three_turns)
