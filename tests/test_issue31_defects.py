"""Regression tests for defects found by the hostile round of issue 31 (each fails before its
fix). Defect 5, the fork's model record, is tested in test_undo_fork.py."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_defect10_an_empty_model_file_is_named_in_its_error(tmp_path) -> None:
    """The engine's `auto` backend choice fingerprints the file first; an empty one made mmap
    fail with "cannot mmap an empty file" and no path."""
    empty = tmp_path / "empty.gguf"
    empty.touch()
    done = subprocess.run(
        [sys.executable, "-m", "engine", "--model", str(empty), "--data-dir",
         str(tmp_path / "data"), "--cache-dir", str(tmp_path / "cache")],
        input='{"type": "shutdown"}\n', capture_output=True, text=True, cwd=REPO, timeout=120)
    # Where ggml is not built, a note that numpy stands in for it may come first.
    events = [json.loads(line) for line in done.stdout.splitlines()]
    event = next(e for e in events if e["type"] == "error")
    assert event["fatal"] is True
    assert event["message"].startswith("not a GGUF file") and str(empty) in event["message"]


@pytest.mark.parametrize("command", ["chat", "send", "fork"])
def test_defect8_chat_send_and_fork_make_the_data_directory_private(tmp_path, tiny_gguf,
                                                                     command) -> None:
    """docs/security.md: an existing data directory others may read is made private (0700)
    by every command that writes sessions, not only by the engine process."""
    data = tmp_path / "data"

    def channel(*argv: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "channel_cli.cli", *argv, "--data-dir",
                               str(data), "--cache-dir", str(tmp_path / "cache")],
                              capture_output=True, text=True, cwd=REPO, timeout=300)
        assert done.returncode == 0, done.stderr
        return done

    if command == "fork":
        channel("send", "--session", "src", "--no-wait", "a session to fork")
    data.mkdir(exist_ok=True)
    os.chmod(data, 0o755)
    done = channel(*{"chat": ["chat", "--model", str(tiny_gguf), "--max-tokens", "2", "hi"],
                     "send": ["send", "--no-wait", "hello"],
                     "fork": ["fork", "src", "copy"]}[command])
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert "made private (0700)" in done.stderr
