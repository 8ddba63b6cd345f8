"""End to end in a real terminal (tmux) with the REAL model: ask, quit, relaunch: warm."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from .conftest import SHARED_CACHE

CHANNEL = Path(sys.executable).parent / "channel"
pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


class Tmux:
    """One detached tmux session running a command; the pane is read as plain text."""

    def __init__(self, command: list[str], size: tuple[int, int] = (110, 34)) -> None:
        self.name = f"channel-test-{uuid.uuid4().hex[:8]}"
        shell = " ".join(_quote(part) for part in command)
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", str(size[0]),
                        "-y", str(size[1]), shell], check=True)

    def screen(self) -> str:
        out = subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name],
                             capture_output=True, text=True)
        return out.stdout

    def alive(self) -> bool:
        return subprocess.run(["tmux", "has-session", "-t", self.name],
                              capture_output=True).returncode == 0

    def keys(self, *keys: str, literal: bool = False) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *(["-l"] if literal else []),
                        *keys], check=True)

    def wait_for(self, text: str, timeout: float = 120.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.25)
        raise AssertionError(f"{text!r} never appeared; the screen was:\n{self.screen()}")

    def wait_exit(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.alive():
            assert time.monotonic() < deadline, f"still running:\n{self.screen()}"
            time.sleep(0.2)

    def kill(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


def _quote(part: str) -> str:
    return "'" + part.replace("'", "'\\''") + "'"


@pytest.mark.real_model
@pytest.mark.slow
def test_ask_quit_relaunch_boots_warm(tmp_path, real_model_path) -> None:
    data = tmp_path / "data"
    command = [str(CHANNEL), "--data-dir", str(data), "--cache-dir", str(SHARED_CACHE),
               "--model", str(real_model_path)]
    first = Tmux(command)
    try:
        first.wait_for("Cold boot · a new conversation")
        # Japan, not France: the 8-bit ggml default (like llama.cpp) answers France with
        # "L'Étoile..." (a 0.08-logit near-tie in f32); Tokyo wins by 2.5 logits on every backend.
        first.keys("What is the capital of Japan?", literal=True)
        first.keys("Enter")
        first.wait_for("tok/s", timeout=180)  # the reply's footer: it has ended
        first.wait_for("Tokyo", timeout=10)
        first.keys("C-q")
        first.wait_exit()
    finally:
        first.kill()
    assert (data / "default.snapshot.bin").stat().st_size > 0

    second = Tmux(command)
    try:
        second.wait_for("Warm boot · resumed your")
        for text in ("What is the capital of Japan?", "Tokyo", "warm boot"):  # status bar
            second.wait_for(text, timeout=10)
        second.keys("C-q")
        second.wait_exit()
    finally:
        second.kill()


def test_closing_the_terminal_flushes_then_exits(tmp_path, tiny_gguf) -> None:
    """SIGHUP (the terminal closed) flushes like Ctrl+Q, though nothing can be drawn."""
    from engine.model.model import load_model

    cache, data = tmp_path / "cache", tmp_path / "data"
    load_model(tiny_gguf, cache)
    pid_file = tmp_path / "pid"
    command = ["sh", "-c", f"echo $$ > {_quote(str(pid_file))}; exec {_quote(str(CHANNEL))} "
               f"--data-dir {_quote(str(data))} --cache-dir {_quote(str(cache))} "
               f"--model {_quote(str(tiny_gguf))}"]
    term = Tmux(command)
    try:
        term.wait_for("Cold boot · a new conversation", timeout=60)
        term.keys("hello", literal=True)
        term.keys("Enter")
        term.wait_for("tok/s", timeout=60)
        assert not (data / "default.snapshot.bin").exists()  # autosave waits 5 s
        pid = int(pid_file.read_text())
    finally:
        term.kill()  # closes the pane's terminal: the app gets SIGHUP
    deadline = time.monotonic() + 30
    while _alive(pid):
        assert time.monotonic() < deadline, "the app outlived its terminal"
        time.sleep(0.1)
    assert (data / "default.snapshot.bin").stat().st_size > 0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.real_model
@pytest.mark.slow
def test_typing_before_the_engine_is_ready_gets_the_answer(tmp_path, real_model_path) -> None:
    """The newcomer's first minute: a fresh cache makes the engine build its weight image
    first (seconds), and the question typed meanwhile is queued, shown, then answered."""
    data, cache = tmp_path / "data", tmp_path / "cache"
    command = [str(CHANNEL), "--data-dir", str(data), "--cache-dir", str(cache),
               "--model", str(real_model_path), "--backend", "numpy"]
    term = Tmux(command)
    try:
        term.wait_for("Starting the engine", timeout=60)
        term.keys("What is the capital of Japan?", literal=True)
        term.keys("Enter")
        screen = term.wait_for("you · pending", timeout=30)
        assert "sends when the engine is ready" in screen
        screen = term.wait_for("tok/s", timeout=300)  # the reply's footer: it has ended
        assert "you · pending" not in screen
        assert "What is the capital of Japan?" in screen  # the question, above its answer
        assert screen.index("What is the capital of Japan?") < screen.index("tok/s")
        term.wait_for("Tokyo", timeout=10)
        term.keys("C-q")
        term.wait_exit()
    finally:
        term.kill()
