"""`channel` with no command takes the generation options `channel chat` takes (issue 29,
item 5): they reach the engine's command line (ring options) and every turn (sampling), under
each session's own settings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from channel_cli.app_command import app_options
from channel_cli.cli import build_parser
from channel_tui.app import ChannelApp

from .test_tui_app import SIZE, until
from .test_tui_settings import FAKE_ENGINE, sent_requests

REPO = Path(__file__).resolve().parent.parent


def test_the_app_takes_sampling_ring_and_reply_options(tmp_path) -> None:
    args = build_parser().parse_args(
        ["--data-dir", str(tmp_path), "--temperature", "0.5", "--min-p", "0.1",
         "--max-tokens", "64", "--ring-slots", "512", "--evict", "h2o"])
    assert getattr(args, "handler", None) is None  # no command: the app
    options = app_options(args)
    assert options.sampling == {"temperature": 0.5, "min_p": 0.1}
    assert options.max_tokens == 64
    argv = options.engine_argv()
    assert argv[argv.index("--ring-slots") + 1] == "512"
    assert argv[argv.index("--evict") + 1] == "h2o"
    # Given nothing, nothing is forced: the model's defaults and the engine's ring.
    plain = app_options(build_parser().parse_args(["--data-dir", str(tmp_path)]))
    assert plain.sampling == {} and plain.max_tokens == 512
    assert "--ring-slots" not in plain.engine_argv() and "--evict" not in plain.engine_argv()
    # A subcommand keeps its own defaults: `chat`'s reply length, its own flags.
    chat = build_parser().parse_args(["chat", "--temperature", "0.3", "hi"])
    assert chat.temperature == 0.3 and chat.max_tokens == 256


@pytest.mark.parametrize("argv, said", [
    (["--temperature", "-1"], "--temperature: temperature must be"),
    (["--max-tokens", "0"], "--max-tokens must be from 1"),
])
def test_a_bad_app_option_is_one_line(tmp_path, argv, said) -> None:
    done = subprocess.run([sys.executable, "-m", "channel_cli.cli", "--data-dir", str(tmp_path),
                           *argv], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith(f"channel: error: {said}") and done.stderr.count("\n") == 1


async def test_the_apps_turns_carry_the_command_lines_sampling(tmp_path) -> None:
    args = build_parser().parse_args(["--data-dir", str(tmp_path), "--temperature", "0.5",
                                      "--max-tokens", "64"])
    options = app_options(args)
    options.engine_command = [sys.executable, str(FAKE_ENGINE)]
    app = ChannelApp(options)
    sent = sent_requests(app)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app.chat.messages) == 3, what="the fake boot")
        app.chat.prompt.load_text("hello")
        await pilot.press("enter")
        await until(pilot, lambda: len(app.chat.messages) == 5, what="the fake reply")
    turn = [fields for kind, fields in sent if kind == "turn"][-1]
    assert turn["temperature"] == 0.5 and turn["max_tokens"] == 64


async def test_the_app_says_a_session_keeps_its_model(tmp_path, monkeypatch) -> None:
    """`channel --model OTHER` on a session made on another model: the app says what
    `channel chat` says (the session runs on its own; --model is for new sessions)."""
    from channel_cli.cli_args import resolve_model_option
    from engine.session.model_record import write_record

    from .tiny_model import write_tiny_gguf

    own, other = (write_tiny_gguf(tmp_path / name) for name in ("own.gguf", "other.gguf"))
    write_record(tmp_path, "default", own, "0" * 32, "tiny-own")
    args = build_parser().parse_args(["--data-dir", str(tmp_path), "--model", str(other)])
    resolve_model_option(args)
    options = app_options(args)
    said = (f"session 'default' runs on model 'tiny-own' ({own.resolve()}); --model applies "
            f"to new sessions")
    assert options.notes == (said,)
    # The same model, a new session, or no --model: nothing to say.
    for argv in (["--model", str(own)], ["--model", str(other), "--session", "new"], []):
        quiet = build_parser().parse_args(["--data-dir", str(tmp_path), *argv])
        resolve_model_option(quiet)
        assert app_options(quiet).notes == ()
    shown: list[str] = []
    original = ChannelApp.notify
    monkeypatch.setattr(ChannelApp, "notify",
                        lambda self, message, **kw: (shown.append(message),
                                                     original(self, message, **kw)))
    options.engine_command = [sys.executable, str(FAKE_ENGINE)]
    app = ChannelApp(options)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app.chat.messages) == 3, what="the fake boot")
        assert said in shown
