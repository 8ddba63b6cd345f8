"""A small client for the engine process: spawn it, send requests, read events.

Standard library only (no numpy), so a front end that imports it still starts fast. Used by
the tests and by `channel send`; the Textual app has its own asyncio client on the same
protocol.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path


class EngineClosed(RuntimeError):
    pass


class EngineProcess:
    def __init__(self, args: Sequence[str] = (), env: dict | None = None,
                 cwd: str | os.PathLike | None = None):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "engine", *args], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8",
            env=env, cwd=cwd, bufsize=1,
        )
        self.events: queue.Queue = queue.Queue()
        self.log: list[dict] = []
        self.stderr_lines: list[str] = []
        self._ids = itertools.count(1)
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                event = {"type": "garbage", "line": line}  # a protocol violation by the engine
            self.log.append(event)
            self.events.put(event)
        self.events.put({"type": "eof"})

    def _drain_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr_lines.append(line.rstrip("\n"))

    def send(self, request: dict | str) -> object:
        """Send a request (a dict gets an id if it has none); return its id."""
        if isinstance(request, dict):
            request = dict(request)
            request.setdefault("id", next(self._ids))
            line, request_id = json.dumps(request), request["id"]
        else:
            line, request_id = request, None
        try:
            self.proc.stdin.write(line.rstrip("\n") + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise EngineClosed("the engine's stdin is closed") from None
        return request_id

    def wait_for(self, match: Callable[[dict], bool] | str, timeout: float = 120.0) -> dict:
        """The next event matching `match` (a predicate or an event type)."""
        predicate = match if callable(match) else (lambda e: e.get("type") == match)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no matching event within {timeout} s")
            try:
                event = self.events.get(timeout=remaining)
            except queue.Empty:
                continue
            if event.get("type") == "eof":
                self.events.put(event)
                raise EngineClosed("the engine exited; stderr: " + " | ".join(
                    self.stderr_lines[-5:]))
            if predicate(event):
                return event

    def request(self, request: dict, until: str, timeout: float = 120.0) -> dict:
        """Send and wait for the event of type `until` answering it (or an error)."""
        request_id = self.send(request)
        event = self.wait_for(
            lambda e: e.get("req") == request_id and e.get("type") in (until, "error"), timeout)
        return event

    def sync(self, cancel_turns: bool = False, timeout: float = 120.0) -> None:
        """Wait until the engine has served every request sent so far (`hello` is answered
        in order). With cancel_turns, a turn that starts meanwhile is cancelled."""
        request_id = self.send({"type": "hello"})
        while True:
            event = self.wait_for(lambda e: e.get("type") in ("hello", "turn_started"), timeout)
            if event["type"] == "hello" and event.get("req") == request_id:
                return
            if event["type"] == "turn_started" and cancel_turns:
                self.send({"type": "cancel", "session": event["session"]})

    def close(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        return self.proc.wait(timeout)


def spawn(data_dir: Path, cache_dir: Path | None = None, model: Path | None = None,
          extra: Sequence[str] = ()) -> EngineProcess:
    args = ["--data-dir", str(data_dir)]
    if cache_dir is not None:
        args += ["--cache-dir", str(cache_dir)]
    if model is not None:
        args += ["--model", str(model)]
    return EngineProcess([*args, *extra])
