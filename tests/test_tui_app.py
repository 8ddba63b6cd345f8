"""Pilot tests of the Textual app against the REAL engine subprocess (tiny random model)."""

from __future__ import annotations

import os
import resource
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from channel_tui.app import ChannelApp
from channel_tui.options import AppOptions
from channel_tui.screens.chat import ChatScreen
from channel_tui.widgets.boot_banner import BootBanner
from channel_tui.widgets.message_widgets import AssistantMessage, Note, UserMessage
from channel_tui.widgets.prompt import Prompt
from channel_tui.widgets.status_bar import StatusBar
from engine.model.model import load_model
from engine.process.protocol import MAX_REPLY_TOKENS

from .tiny_model import TinySpec, write_tiny_gguf

SIZE = (100, 32)


@pytest.fixture
def make_app(tmp_path, tiny_gguf, tiny_cache) -> Callable[..., ChannelApp]:
    def make(**overrides) -> ChannelApp:
        fields = dict(data_dir=tmp_path / "data", model=tiny_gguf, cache_dir=tiny_cache,
                      max_tokens=24, debounce_s=60.0, export_dir=tmp_path,
                      config_dir=tmp_path / "config")
        fields.update(overrides)
        return ChannelApp(AppOptions(**fields))

    return make


def record_events(app: ChannelApp) -> list[dict]:
    """Every engine event the chat screen handles, in order."""
    seen: list[dict] = []
    handle = ChatScreen.handle_event

    async def spy(event: dict) -> None:
        seen.append(event)
        await handle(app.chat, event)

    app.chat.handle_event = spy  # type: ignore[method-assign]
    return seen


@pytest.fixture
def raw_events(monkeypatch) -> list[dict]:
    """Every engine event as the app receives it, before the chat screen's queue."""
    seen: list[dict] = []
    original = ChannelApp.on_engine_event

    def spy(self, message) -> None:
        seen.append(message.event)
        original(self, message)

    monkeypatch.setattr(ChannelApp, "on_engine_event", spy)
    return seen


async def until(pilot, predicate: Callable[[], object], timeout: float = 60.0,
                what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


def on_screen(app, kind: type) -> bool:
    """Whether a `kind` screen is active and composed: a pushed screen becomes app.screen
    before its children mount, which a loaded machine makes visible to a query."""
    return isinstance(app.screen, kind) and app.screen.is_mounted


def of_type(events: list[dict], kind: str, **match) -> list[dict]:
    return [e for e in events if e.get("type") == kind
            and all(e.get(k) == v for k, v in match.items())]


async def booted(pilot, events: list[dict], count: int = 1) -> dict:
    await until(pilot, lambda: len(of_type(events, "booted")) >= count, what="booted")
    await pilot.pause(0.1)
    return of_type(events, "booted")[count - 1]


async def say(pilot, app: ChannelApp, text: str, events: list[dict]) -> dict:
    """Type a message, press Enter and wait for the end of the reply."""
    ends = len(of_type(events, "end_of_turn"))
    prompt = app.chat.query_one(Prompt)
    prompt.load_text(text)
    await pilot.press("enter")
    await until(pilot, lambda: len(of_type(events, "end_of_turn")) > ends, what="reply")
    await until(pilot, lambda: app.chat.current is None, what="reply finished")
    return of_type(events, "end_of_turn")[-1]


def status(app: ChannelApp) -> str:
    return " ".join(part.plain for part in app.chat.query_one(StatusBar).segments())


def banner(app: ChannelApp) -> str:
    return str(app.chat.query_one("#boot-line").render())


async def test_send_streams_and_recalls_prompts(make_app) -> None:
    app = make_app()
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        first = await booted(pilot, events)
        assert first["kind"] == "cold" and "Cold boot · a new conversation" in banner(app)
        assert "tiny-test-llama" in status(app) and "cold boot" in status(app)
        end = await say(pilot, app, "hello there", events)
        # Tokens that arrive together are merged into one event (tested in test_tui_units);
        # a long reply streams as many (see the cancel test).
        tokens = of_type(events, "token", req=end["req"])
        assert tokens and "".join(t["text"] for t in tokens) == end["reply"]
        replies = app.chat.query(AssistantMessage)
        assert replies.last().text == end["reply"] and replies.last().stop == end["stop"]
        assert [w.render().plain for w in app.chat.query(UserMessage)] == ["hello there"]
        for n in range(3):  # more than a screenful: the view stays pinned to the bottom
            await say(pilot, app, f"more {n}", events)
        transcript = app.chat.query_one("#transcript")
        await pilot.pause(0.2)
        assert transcript.max_scroll_y > 0 and transcript.scroll_y == transcript.max_scroll_y
        last = of_type(events, "end_of_turn")[-1]
        assert f"{last['decode_tok_s']:.1f} tok/s" in status(app)
        assert "saving in a moment" in status(app)
        ring = of_type(events, "ring")[-1]
        assert f"context {ring['active']:,}/{ring['capacity']:,}" in status(app)
        # Ctrl+Up recalls the sent prompt (then Up goes on); Down returns to the empty draft.
        await pilot.press("ctrl+up")
        assert app.chat.query_one(Prompt).text == "more 2"
        await pilot.press("up", "up", "up")
        assert app.chat.query_one(Prompt).text == "hello there"
        await pilot.press("down", "down", "down")
        await pilot.press("down")
        assert app.chat.query_one(Prompt).text == ""
        # Ctrl+J adds a line instead of sending.
        await pilot.press("a", "ctrl+j", "b")
        assert app.chat.query_one(Prompt).text == "a\nb"


@pytest.fixture(scope="module")
def talkative_gguf(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny model that keeps talking: the shared one (tied embeddings) says "\n" over and
    over, which the loop guard stops after 256 tokens; this one's greedy replies wander
    through the ring's evictions without an exact cycle. Its GGUF and a warm weight cache."""
    folder = tmp_path_factory.mktemp("talkative")
    gguf = write_tiny_gguf(folder / "talkative.gguf", TinySpec(tied=False))
    load_model(gguf, folder / "cache")
    return gguf, folder / "cache"


async def test_escape_cancels_and_a_queued_message_goes_next(make_app, raw_events,
                                                              talkative_gguf) -> None:
    # The tiny model decodes ~2000 tok/s: ask for far more than it can make before Esc (the
    # most a turn may ask for), greedily (its sampled replies end soon).
    gguf, cache = talkative_gguf
    app = make_app(max_tokens=MAX_REPLY_TOKENS, model=gguf, cache_dir=cache,
                   sampling={"temperature": 0})
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot, events)
        prompt = app.chat.query_one(Prompt)
        prompt.load_text("talk for a long time")
        await pilot.press("enter")
        await until(pilot, lambda: of_type(raw_events, "token"), what="first token")
        prompt.load_text("second")
        await pilot.press("enter")  # while the reply streams: queued, with a note
        note = str(app.chat.query_one("#note").render())
        assert app.chat.queued == "second" and "Queued: second" in note
        assert prompt.text == ""
        await pilot.press("escape")
        await until(pilot, lambda: len(of_type(raw_events, "turn_started")) == 2, what="next")
        await pilot.press("escape")  # stop that one too
        await until(pilot, lambda: len(of_type(events, "end_of_turn")) == 2, what="2 replies")
        await until(pilot, lambda: app.chat.current is None)
        first, second = of_type(events, "end_of_turn")
        assert first["stop"] == "cancelled" and first["decode_tokens"] < MAX_REPLY_TOKENS
        assert len(of_type(events, "token", req=first["req"])) > 1  # it arrived in pieces
        cancelled = app.chat.query(AssistantMessage).first()
        assert cancelled.has_class("cancelled") and "cancelled" in str(
            cancelled.query_one(".stop-note").render())
        assert [m.stop for m in app.chat.messages if m.role == "assistant"] == [
            "cancelled", second["stop"]]
        users = [w.render().plain for w in app.chat.query(UserMessage)]
        assert users == ["talk for a long time", "second"] and app.chat.queued is None


async def test_cold_replay_shows_progress_rate_and_time_left(make_app, raw_events, tmp_path,
                                                              monkeypatch) -> None:
    data = tmp_path / "data"
    data.mkdir()
    lines = ['{"id":"01JDZ000000000000000000000","role":"system","content":"You are tiny.",'
             '"ts":"2026-11-29T10:00:00.000Z"}']
    for i in range(1, 13):
        role = "user" if i % 2 else "assistant"
        lines.append(f'{{"id":"01JDZ{i:021d}","role":"{role}","content":"{"word " * 120}",'
                     f'"ts":"2026-11-29T10:00:00.000Z"}}')
    (data / "default.stream.jsonl").write_text("\n".join(lines) + "\n")
    shown: list[str] = []
    progress = BootBanner.progress

    def spy(self, line, done, total, tokens=True) -> None:
        progress(self, line, done, total, tokens)
        shown.append(str(self.query_one("#boot-detail").render()))

    monkeypatch.setattr(BootBanner, "progress", spy)
    app = make_app()
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        first = await booted(pilot, events)
        assert first["kind"] == "cold" and first["replayed_events"] == 13
        reports = of_type(raw_events, "replay_progress")
        assert len(reports) >= 3 and reports[-1]["done"] == reports[-1]["total"]
        assert any("tok/s" in text and "left" in text for text in shown), shown
        assert banner(app).startswith("Cold boot · re-read your conversation (13 lines")
        assert len(app.chat.query(UserMessage)) == 6


async def test_save_restore_and_export(make_app, tmp_path) -> None:
    app = make_app()
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot, events)
        await say(pilot, app, "remember this", events)
        await pilot.press("ctrl+s")
        await until(pilot, lambda: " s ago" in status(app) or "saved just now" in status(app),
                    what="saved")
        assert (tmp_path / "data" / "default.snapshot.bin").exists()
        await pilot.press("ctrl+s")
        await until(pilot, lambda: "saved, nothing new" in status(app), what="unchanged")
        await pilot.press("f8")
        await until(pilot, lambda: of_type(events, "restored"), what="restored")
        await pilot.pause(0.1)
        restored = of_type(events, "restored")[0]
        assert banner(app).startswith("Restored the last save · ")
        assert restored["kind"] == "warm"
        assert [m.role for m in app.chat.messages] == ["system", "user", "assistant"]
        assert len(app.chat.query(UserMessage)) == 1
        await pilot.press("ctrl+e")
        exported = list(tmp_path.glob("default-*.md"))
        assert len(exported) == 1
        text = exported[0].read_text()
        assert "## You" in text and "remember this" in text and "## Assistant" in text


async def test_quit_flushes_the_working_state(make_app, tmp_path) -> None:
    app = make_app()
    events = record_events(app)
    snapshot = tmp_path / "data" / "default.snapshot.bin"
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot, events)
        await say(pilot, app, "one", events)
        await pilot.press("ctrl+s")
        await until(pilot, snapshot.exists, what="first snapshot")
        saved_at = snapshot.stat().st_mtime_ns
        await say(pilot, app, "two", events)
        engine = app.engine
        await pilot.press("ctrl+q")
        await pilot.press("ctrl+c")  # a second press while flushing is ignored
        await until(pilot, lambda: not app.is_running, what="exit")
    assert engine is not None and engine.bye.is_set() and engine.proc.returncode == 0
    # The flush records turn two as a segment after the base (docs/snapshot.md, "Chains").
    flushed = of_type(events, "snapshot", status="saved")[-1]
    assert flushed["kind"] == "segment"
    assert snapshot.stat().st_mtime_ns == saved_at
    assert (snapshot.parent / "default.snapshot.d" / "000001.seg").stat().st_size == \
        flushed["bytes"]
    assert app.return_code == 0


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
async def test_a_failing_save_is_reported_not_raised(make_app, tmp_path) -> None:
    app = make_app()
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot, events)
        await say(pilot, app, "fill the disk", events)
        # A file-size limit on the engine stands in for a full disk: the snapshot's writes
        # are refused part-way (EFBIG), while the small stream still takes its lines.
        limit = 16 << 10
        resource.prlimit(app.engine.pid, resource.RLIMIT_FSIZE, (limit, limit))
        await pilot.press("ctrl+s")
        await until(pilot, lambda: "save failed:" in status(app), what="failure")
        assert "file too large" in status(app).lower()
        await say(pilot, app, "still chatting", events)  # the session carries on
        await pilot.press("ctrl+q")
        await until(pilot, lambda: not app.is_running, what="exit")
    assert not (tmp_path / "data" / "default.snapshot.bin.tmp").exists()
    assert app.return_code == 1  # and the exit message says the state was NOT saved


async def test_sigterm_quits_like_ctrl_q(make_app, tmp_path) -> None:
    app = make_app()
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot, events)
        await say(pilot, app, "before the signal", events)
        os.kill(os.getpid(), signal.SIGTERM)  # the app's handler replaces the default
        await until(pilot, lambda: not app.is_running, what="exit")
    assert (tmp_path / "data" / "default.snapshot.bin").exists()
    assert app.engine is not None and app.engine.bye.is_set()


async def test_switching_sessions_boots_the_other_one_warm(make_app) -> None:
    app = make_app(session="alpha")
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot, events)
        await say(pilot, app, "alpha talk", events)
        await pilot.press("ctrl+n")
        await pilot.pause(0.1)
        new_name = app.screen.query_one("#new-name")
        new_name.value = "beta"
        await pilot.press("enter")
        beta = await booted(pilot, events, 2)
        assert beta["session"] == "beta" and beta["kind"] == "cold"
        assert app.chat.session == "beta" and not app.chat.query(UserMessage)
        await say(pilot, app, "beta talk", events)
        await pilot.press("ctrl+o")
        await pilot.pause(0.2)
        table = app.screen.query_one("#sessions-table")
        names = [table.get_row_at(i)[1] for i in range(table.row_count)]
        assert set(names) == {"alpha", "beta"}
        table.move_cursor(row=names.index("alpha"))
        await pilot.press("enter")
        alpha = await booted(pilot, events, 3)
        assert alpha["session"] == "alpha" and alpha["kind"] == "warm"
        assert [w.render().plain for w in app.chat.query(UserMessage)] == ["alpha talk"]
        assert "Warm boot" in banner(app) and "session alpha" in status(app)


async def test_engine_crash_restarts_warm_and_keeps_the_draft(make_app) -> None:
    app = make_app()
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot, events)
        await say(pilot, app, "before the crash", events)
        await pilot.press("ctrl+s")
        await until(pilot, lambda: of_type(events, "snapshot", status="saved"), what="save")
        app.chat.query_one(Prompt).load_text("an unsent draft")
        first = app.engine
        os.kill(first.pid, signal.SIGKILL)
        again = await booted(pilot, events, 2)
        assert app.engine is not first and app.generation == 2
        assert again["kind"] == "warm"
        assert app.chat.query_one(Prompt).text == "an unsent draft"
        notes = " ".join(n.render().plain for n in app.chat.query(Note))
        assert "killed by SIGKILL" in notes and "booted warm" in notes
        assert "Warm boot" in banner(app)
        await say(pilot, app, "after the crash", events)  # and it still answers


async def test_bad_model_path_is_a_readable_message(make_app, tmp_path) -> None:
    app = make_app(model=tmp_path / "missing.gguf")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.chat.fatal, what="fatal message")
        line = banner(app)
        assert line.startswith("⚠") and "missing.gguf" in line and "Traceback" not in line
        assert "engine stopped" in status(app) and app.generation == 1  # not restarted
        await pilot.press("ctrl+q")
        await until(pilot, lambda: not app.is_running, what="exit")
    assert app.return_code == 2  # and the sentence is printed again after the app closes


async def test_unusable_data_dir_is_a_readable_message(make_app, tmp_path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    app = make_app(data_dir=not_a_dir)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.chat.fatal, what="fatal message")
        assert banner(app) == f"⚠ The data directory {not_a_dir} is not a directory"
        assert app.engine is None  # not started at all
        await pilot.press("ctrl+q")
        await until(pilot, lambda: not app.is_running, what="exit")
    assert app.return_code == 2


async def test_boot_comparison_screen(make_app) -> None:
    app = make_app()
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot, events)
        await say(pilot, app, "compare me", events)
        await pilot.press("f7")
        screen = app.screen
        await until(pilot, lambda: screen.result is not None, what="comparison")
        result = screen.result
        assert result["warm_kind"] == "warm" and result["cold_events"] == 3
        assert result["ratio"] > 0 and result["warm_slots"] > 0
        await pilot.press("escape")
        assert app.screen is app.chat
