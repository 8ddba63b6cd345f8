"""The model picker's Download…: `channel pull --json REPO[:QUANT]` in a child process, its
progress read from the child's stderr.

A child rather than a call: the app imports neither huggingface_hub nor the engine (it must
start fast), and a download stopped by closing the picker keeps what arrived, which the next
pull of the same file goes on from (engine/tools/pull.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

PULL_COMMAND = (sys.executable, "-m", "channel_cli.cli", "pull", "--json")
PROGRESS_PREFIXES = ("downloading [", "verifying [")
ERROR_PREFIX = "channel: error: "


@dataclass(frozen=True)
class PullOutcome:
    record: dict | None  # `channel pull --json`'s object: path, name, problem, ...
    error: str | None  # the one line the command failed with

    @property
    def summary(self) -> str:
        if self.record is None:
            return f"Download failed: {self.error}"
        name, path = self.record.get("name"), self.record.get("path")
        if self.record.get("problem"):
            return f"Downloaded {name}, but Channel cannot run it: {self.record['problem']}"
        return f"Downloaded {name} ({path})."


class ModelDownload:
    """One `channel pull`, run to its end by `run` (blocking: a worker thread's job)."""

    def __init__(self, spec: str, command: tuple[str, ...] = PULL_COMMAND) -> None:
        self.argv = [*command, spec]
        self.process: subprocess.Popen | None = None

    def run(self, on_progress: Callable[[str], None]) -> PullOutcome:
        """Run the pull; `on_progress` gets each progress line (the bar as text)."""
        try:
            self.process = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as exc:
            return PullOutcome(None, f"cannot run `channel pull`: {exc.strerror or exc}")
        assert self.process.stderr is not None and self.process.stdout is not None
        error, pending = None, b""
        while chunk := os.read(self.process.stderr.fileno(), 4096):
            # The bar redraws itself with \r: each piece between \r and \n is one state.
            *lines, pending = (pending + chunk).replace(b"\r", b"\n").split(b"\n")
            for line in (raw.decode("utf-8", "replace").strip() for raw in lines):
                if line.startswith(PROGRESS_PREFIXES):
                    on_progress(line)
                elif line.startswith(ERROR_PREFIX):
                    error = line.removeprefix(ERROR_PREFIX)
        stdout = self.process.stdout.read().decode("utf-8", "replace").strip()
        code = self.process.wait()
        record = None
        if stdout and code in (0, 1):  # 1: downloaded, but a model Channel cannot run
            try:
                record = json.loads(stdout.splitlines()[-1])
            except ValueError:
                record = None
        if record is None:
            return PullOutcome(None, error or f"`channel pull` ended with status {code}")
        return PullOutcome(record, None)

    def stop(self) -> None:
        """End the child (what it downloaded stays, for the next pull to go on from)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
