"""The session's write-ahead log: `<session>.stream.jsonl`, one JSON event per line.

The stream is the transcript and the source of truth; snapshots are only a cache of the state
it implies. A user event is appended and fsynced before the engine acts on it, so a crash
never loses what the person typed. Reading is forgiving: a torn last line (a crash mid-write)
and any line that is not a valid event are reported with their line number and skipped, but
never deleted or rewritten.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ulid import ULID

from ..errors import StreamError
from ..paths import ensure_private_dir

ROLES = ("system", "user", "assistant")
REQUIRED = ("id", "role", "content", "ts")


@dataclass(frozen=True)
class StreamEvent:
    id: str  # ULID, monotonic within a session
    role: str
    content: str
    ts: str  # ISO-8601 UTC
    extra: dict = field(default_factory=dict)  # optional fields: tokens, stop, settings, ...

    def to_json(self) -> str:
        record = {"id": self.id, "role": self.role, "content": self.content, "ts": self.ts}
        record.update(self.extra)
        return json.dumps(record, ensure_ascii=False)

    @staticmethod
    def from_record(record: dict) -> StreamEvent:
        extra = {k: v for k, v in record.items() if k not in REQUIRED}
        return StreamEvent(record["id"], record["role"], record["content"], record["ts"], extra)


@dataclass(frozen=True)
class StreamRead:
    events: list[StreamEvent]
    warnings: list[str]  # one line each, with the line number
    end_offset: int  # bytes consumed; a watcher resumes from here


def parse_event(line: str) -> StreamEvent:
    """Parse one stream line; raise ValueError naming what is wrong with it."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg})") from None
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    missing = [k for k in REQUIRED if k not in record]
    if missing:
        raise ValueError(f"missing field {', '.join(missing)}")
    if record["role"] not in ROLES:
        raise ValueError(f"unknown role {record['role']!r}")
    if not all(isinstance(record[k], str) for k in REQUIRED):
        raise ValueError("id, role, content and ts must be strings")
    try:
        ULID.from_str(record["id"])
    except ValueError:
        raise ValueError(f"id {record['id']!r} is not a ULID") from None
    return StreamEvent.from_record(record)


class StreamLog:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._last_id: ULID | None = None
        # Ids this process appended and has not yet seen come back through a watcher; a
        # watcher skips them, so the engine never takes its own appends for new input.
        self.own_ids: set[str] = set()

    def read(self, start: int = 0) -> StreamRead:
        """Every valid event from byte `start` on, plus a warning for each skipped line."""
        try:
            with open(self.path, "rb") as f:
                f.seek(start)
                data = f.read()
        except FileNotFoundError:
            return StreamRead([], [], start)
        except OSError as exc:
            raise StreamError(f"cannot read {self.path}: {exc.strerror}") from None
        events, warnings = [], []
        lines = data.split(b"\n")
        torn = lines.pop()  # after the last newline: empty unless the last write was cut short
        first_line = self._line_number(start) + 1
        for i, raw in enumerate(lines):
            if not raw.strip():
                continue
            try:
                event = parse_event(raw.decode("utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                warnings.append(f"{self.path.name} line {first_line + i}: skipped, {exc}")
                continue
            events.append(event)
        end = start + len(data) - len(torn)
        if torn.strip():
            warnings.append(
                f"{self.path.name} line {first_line + len(lines)}: torn last line skipped "
                f"({len(torn)} bytes)"
            )
        if events:
            self._observe(events[-1].id)
        return StreamRead(events, warnings, end)

    def append(self, role: str, content: str, **extra) -> StreamEvent:
        """Append one event and fsync it before returning: the write-ahead guarantee."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        event = StreamEvent(self._next_id(), role, content, _now(), extra)
        line = (event.to_json() + "\n").encode("utf-8")
        ensure_private_dir(self.path.parent)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                if self._ends_torn(fd):
                    line = b"\n" + line  # never glue a new event onto a torn fragment
                os.write(fd, line)
                os.fsync(fd)
                self.own_ids.add(event.id)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StreamError(f"cannot append to {self.path}: {exc.strerror}") from None
        return event

    def _next_id(self) -> str:
        new = ULID()
        if self._last_id is not None and int(new) <= int(self._last_id):
            new = ULID.from_int(int(self._last_id) + 1)  # same millisecond: stay monotonic
        self._last_id = new
        return str(new)

    def _observe(self, event_id: str) -> None:
        seen = ULID.from_str(event_id)
        if self._last_id is None or int(seen) > int(self._last_id):
            self._last_id = seen

    @staticmethod
    def _ends_torn(fd: int) -> bool:
        size = os.fstat(fd).st_size
        return size > 0 and os.pread(fd, 1, size - 1) != b"\n"

    def _line_number(self, offset: int) -> int:
        if offset == 0:
            return 0
        with open(self.path, "rb") as f:
            return f.read(offset).count(b"\n")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
