"""Regression tests for defects found by the hostile round of issue 31 (each fails before its
fix). Defect 5, the fork's model record, is tested in test_undo_fork.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
    event = json.loads(done.stdout.splitlines()[0])
    assert event["type"] == "error" and event["fatal"] is True
    assert event["message"].startswith("not a GGUF file") and str(empty) in event["message"]
