"""The asyncio engine client: spawn `python -m engine`, write requests, post events.

A reader task turns each stdout line into an `EngineEvent` message for the app; another keeps
the tail of stderr (the engine logs there) so that a crash can be explained; when stdout ends
the client posts `EngineExited`. Nothing here touches widgets: the app reacts to the messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence

from textual.message_pump import MessagePump

from .messages import EngineEvent, EngineExited

READ_CHUNK = 1 << 16
STDERR_LINE_LIMIT = 1 << 20
STDERR_TAIL = 40


class EngineClient:
    def __init__(self, target: MessagePump, argv: Sequence[str], generation: int,
                 env: dict[str, str] | None = None) -> None:
        self.target = target
        self.argv = list(argv)
        self.generation = generation
        self.env = env
        self.proc: asyncio.subprocess.Process | None = None
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self.bye = asyncio.Event()
        self.exited = asyncio.Event()
        self.ready = False
        self._ids = itertools.count(1)
        self._callbacks: dict[int, Callable[[dict], None]] = {}
        self.flush_events: list[dict] = []  # the `snapshot` events answering `shutdown`
        self._shutdown_sent = False

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None and not self.exited.is_set()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    async def run(self) -> None:
        """Spawn the engine and pump its output until it exits (run this as a worker)."""
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, limit=STDERR_LINE_LIMIT, env=self.env,
                start_new_session=True,  # a Ctrl+C on the terminal reaches the app only
            )
        except OSError as exc:
            self.exited.set()
            self.target.post_message(EngineExited(self.generation, None, [],
                                                  f"cannot start the engine: {exc}"))
            return
        await asyncio.gather(self._read_stdout(), self._read_stderr())
        returncode = await self.proc.wait()
        self.exited.set()
        self.target.post_message(EngineExited(self.generation, returncode,
                                              list(self.stderr_tail)))

    async def _read_stdout(self) -> None:
        """Read stdout in chunks and hand over every complete line of each chunk together.

        A fast backend streams thousands of tokens a second; merging the `token` events that
        arrived together keeps the UI's queue short (and Esc responsive) however far the UI
        falls behind: the slower it is, the bigger the chunks.
        """
        assert self.proc is not None and self.proc.stdout is not None
        buffer = bytearray()
        while chunk := await self.proc.stdout.read(READ_CHUNK):
            buffer += chunk
            end = buffer.rfind(b"\n")
            if end < 0:
                continue
            lines = bytes(buffer[:end]).split(b"\n")
            del buffer[: end + 1]
            for event in merge_tokens(self._parse(line) for line in lines):
                self._deliver(event)

    def _parse(self, line: bytes) -> dict | None:
        if not line.strip():
            return None
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            self.stderr_tail.append(f"(not JSON on stdout) {line[:200]!r}")
            return None
        return event if isinstance(event, dict) else None

    def _deliver(self, event: dict) -> None:
        kind = event.get("type")
        if kind == "snapshot" and self._shutdown_sent:
            self.flush_events.append(event)  # read before `bye`, so complete by then
        elif kind == "bye":
            self.bye.set()
        elif kind == "ready":
            self.ready = True
        callback = self._callbacks.get(event.get("req"))  # type: ignore[arg-type]
        if callback is not None:
            callback(event)
        self.target.post_message(EngineEvent(event, self.generation))

    async def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while True:
            try:
                line = await self.proc.stderr.readline()
            except ValueError:  # a line over the limit: keep reading past it
                continue
            if not line:
                return
            self.stderr_tail.append(line.decode("utf-8", "replace").rstrip())

    def send(self, kind: str, on_event: Callable[[dict], None] | None = None,
             **fields: object) -> int | None:
        """Write one request; return its id, or None when the engine is not running.

        `on_event`, if given, is called (on the event loop) with every event answering it.
        """
        if not self.running or self.proc is None or self.proc.stdin is None:
            return None
        request_id = next(self._ids)
        if on_event is not None:
            self._callbacks[request_id] = on_event
        line = json.dumps({"type": kind, "id": request_id, **fields}, ensure_ascii=False)
        try:
            self.proc.stdin.write(line.encode("utf-8") + b"\n")
        except (BrokenPipeError, ConnectionResetError, RuntimeError):
            return None
        return request_id

    def forget(self, request_id: int | None) -> None:
        self._callbacks.pop(request_id, None)  # type: ignore[arg-type]

    async def shutdown(self, timeout: float = 120.0) -> bool:
        """Ask for the synchronous flush (`shutdown`) and wait for `bye` and the exit.

        Returns True when the engine said `bye` (or had nothing to flush yet). A wedged
        engine is killed after `timeout`.
        """
        if not self.ready:
            # Never loaded (or failed to): no session is open, so there is nothing to flush,
            # and the engine reads requests only once loaded (a first-run weight build can
            # take minutes). Stop it now.
            if self.proc is not None and self.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.send_signal(signal.SIGTERM)
                await self._wait_exit(2.0)
            return True
        self._shutdown_sent = True
        if self.send("shutdown") is None:
            await self._wait_exit(5.0)
            return self.bye.is_set()
        waiters = [asyncio.ensure_future(self.bye.wait()),
                   asyncio.ensure_future(self.exited.wait())]
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()
        await self._wait_exit(10.0)
        return self.bye.is_set()

    def shutdown_blocking(self, timeout: float = 120.0) -> bool:
        """`shutdown` without the event loop, for when the terminal is gone (SIGHUP) and the
        UI can no longer run. Returns True when the engine exited within `timeout`."""
        proc = self.proc
        if proc is None or proc.returncode is not None or self.exited.is_set():
            return True
        pid = proc.pid
        if not self.ready:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)  # still loading: nothing to flush
            if not _wait_gone(pid, 2.0):
                self.kill()
            return True
        line = json.dumps({"type": "shutdown", "id": next(self._ids)}).encode() + b"\n"
        try:
            pipe = proc.stdin.transport.get_extra_info("pipe") if proc.stdin else None
            os.write(pipe.fileno(), line)
        except (AttributeError, OSError):
            return _wait_gone(pid, 5.0)  # stdin already closed: the engine flushes on EOF
        return _wait_gone(pid, timeout)

    async def close(self, timeout: float = 10.0) -> None:
        """Close stdin (the engine flushes and exits on EOF); kill it if it lingers."""
        if self.proc is None or self.proc.returncode is not None:
            return
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError, RuntimeError):
                self.proc.stdin.close()
        await self._wait_exit(timeout)

    async def _wait_exit(self, timeout: float) -> None:
        if self.proc is None:
            return
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except asyncio.TimeoutError:
            self.kill()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.proc.wait(), 5.0)

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)


def _wait_gone(pid: int, timeout: float) -> bool:
    """Poll until `pid` has exited. A zombie counts as exited: with the event loop blocked,
    whether anyone reaps it depends on asyncio's child watcher."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[-1].split()[0] == "Z":
                    return True
        except ProcessLookupError:
            return True
        except OSError:
            pass  # no /proc here: rely on os.kill alone
        time.sleep(0.05)
    return False


def merge_tokens(events: Iterable[dict | None]) -> Iterator[dict]:
    """Consecutive `token` events of one request become one event with the joined text."""
    pending: dict | None = None
    for event in events:
        if event is None:
            continue
        if (pending is not None and event.get("type") == "token"
                and event.get("req") == pending.get("req")
                and event.get("session") == pending.get("session")):
            pending["text"] = pending.get("text", "") + event.get("text", "")
            continue
        if pending is not None:
            yield pending
            pending = None
        if event.get("type") == "token":
            pending = dict(event)
        else:
            yield event
    if pending is not None:
        yield pending
