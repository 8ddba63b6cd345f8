"""The session's write-ahead log: `<session>.stream.jsonl`, one JSON event per line.

The stream is the transcript and the source of truth; snapshots are only a cache of the state
it implies. A user event is appended and fsynced before the engine acts on it, so a crash
never loses what the person typed. Reading is forgiving: a torn last line (a crash mid-write)
and any line that is not a valid event are reported with their line number and skipped, but
never deleted or rewritten. `decode_line` is the one way a line becomes an event, for the
engine's own lines and for lines other programs append alike.

Ids are ULIDs, increasing in file order. A line whose id repeats or does not follow every id
before it is reported (and kept, in file order): a warm boot refuses to trust an anchor such
a line could make ambiguous (session.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ulid import ULID

from ..errors import StreamError
from ..fileio import open_regular
from ..text import decode_utf8, lone_surrogate_in, parse_json, utf8_size

ROLES = ("system", "user", "assistant")
REQUIRED = ("id", "role", "content", "ts")
# Far above any line the engine writes (a message is at most 1 MiB, 6 MiB JSON-escaped): a
# longer line is some other program's, and is skipped rather than held and tokenized.
MAX_LINE_BYTES = 8 << 20
ORDER_MEMORY = 8  # read ends whose id state is kept, so watchers resume checks from them
TAIL_BYTES = 1 << 16  # read from the end to find the last line's id before an append


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
    # events[i] whose id repeats or is not after every earlier id -> why, with line numbers
    disorder: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _IdOrder:
    """The ids of every line before some offset: what the next line's id must follow."""

    lines: int = 0  # complete lines before the offset
    first_line: dict[str, int] = field(default_factory=dict)  # id -> line it first appeared on
    top: int = -1  # the largest id so far, as an integer
    top_line: int = 0


def decode_line(raw: bytes) -> StreamEvent:
    """Turn one stream line into an event; raise ValueError naming what is wrong with it."""
    if len(raw) > MAX_LINE_BYTES:
        raise ValueError(f"longer than {MAX_LINE_BYTES} bytes")
    return parse_event(decode_utf8(raw))


def parse_event(line: str) -> StreamEvent:
    """Parse one stream line's text; raise ValueError naming what is wrong with it."""
    record = parse_json(line)
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    missing = [k for k in REQUIRED if k not in record]
    if missing:
        raise ValueError(f"missing field {', '.join(missing)}")
    if not all(isinstance(record[k], str) for k in REQUIRED):
        raise ValueError("id, role, content and ts must be strings")
    for key, value in record.items():
        if lone_surrogate_in(key) or lone_surrogate_in(value):
            raise ValueError(f"field {key!r} holds a lone surrogate (not valid Unicode)")
    if record["role"] not in ROLES:
        raise ValueError(f"unknown role {record['role']!r}")
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
        self._orders: dict[int, _IdOrder] = {0: _IdOrder()}  # read end offset -> its ids

    def read(self, start: int = 0) -> StreamRead:
        """Every valid event from byte `start` on, plus a warning for each skipped line and
        each id out of order. `start` is 0 or the end offset of an earlier read."""
        try:
            fd = open_regular(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return StreamRead([], [], start)
        with os.fdopen(fd, "rb") as f:
            try:
                f.seek(start)
                data = f.read()
            except OSError as exc:
                raise StreamError(f"cannot read {self.path}: {exc.strerror}") from None
        # Checked from this read's start on; a start no read ended at restarts the checks.
        order = self._orders.get(start) or _IdOrder(self._line_number(start))
        ids, top, top_line = dict(order.first_line), order.top, order.top_line
        events, warnings, disorder = [], [], {}
        lines = data.split(b"\n")
        torn = lines.pop()  # after the last newline: empty unless the last write was cut short
        for i, raw in enumerate(lines):
            number = order.lines + i + 1
            if not raw.strip():
                continue
            try:
                event = decode_line(raw)
            except ValueError as exc:
                warnings.append(f"{self.path.name} line {number}: skipped, {exc}")
                continue
            value = int(ULID.from_str(event.id))
            if event.id in ids:
                disorder[len(events)] = (f"line {number}: duplicate id {event.id} (first on "
                                         f"line {ids[event.id]})")
            elif value <= top:
                disorder[len(events)] = (f"line {number}: id {event.id} out of order (not "
                                         f"after line {top_line}'s)")
            if len(events) in disorder:
                warnings.append(f"{self.path.name} {disorder[len(events)]}")
            ids.setdefault(event.id, number)
            if value > top:
                top, top_line = value, number
            events.append(event)
        end = start + len(data) - len(torn)
        if torn.strip():
            warnings.append(
                f"{self.path.name} line {order.lines + len(lines) + 1}: torn last line skipped "
                f"({len(torn)} bytes)"
            )
        self._remember(end, _IdOrder(order.lines + len(lines), ids, top, top_line))
        return StreamRead(events, warnings, end, disorder)

    def append(self, role: str, content: str, **extra) -> StreamEvent:
        """Append one event and fsync it before returning: the write-ahead guarantee.

        An event the reader would refuse (a lone surrogate, an oversized line) is refused
        here instead, so the stream never holds a line of ours that a boot would skip.
        Appenders that use this (the engine, `channel send`) take an exclusive lock and give
        the new event an id after the file's last one, so their ids stay in file order even
        when they append in the same millisecond.
        """
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        ts = _now()
        size = utf8_size(StreamEvent(str(ULID()), role, content, ts, extra).to_json() + "\n")
        if size is None:
            raise StreamError(f"cannot append to {self.path.name}: the event holds a lone "
                              f"surrogate (not valid Unicode)")
        if size > MAX_LINE_BYTES:
            raise StreamError(f"cannot append to {self.path.name}: a {size}-byte line is "
                              f"over the stream's limit of {MAX_LINE_BYTES}")
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = open_regular(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        except FileNotFoundError as exc:
            raise StreamError(f"cannot append to {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd is closed
            torn, last_id = _tail(fd)
            event = StreamEvent(self._next_id(last_id), role, content, ts, extra)
            line = (event.to_json() + "\n").encode("utf-8")
            if torn:
                line = b"\n" + line  # never glue a new event onto a torn fragment
            _write_whole(fd, line)
            self.own_ids.add(event.id)
        except OSError as exc:
            raise StreamError(f"cannot append to {self.path}: {exc.strerror or exc} (the "
                              f"stream is as it was)") from None
        finally:
            os.close(fd)
        return event

    def _remember(self, end: int, order: _IdOrder) -> None:
        self._orders.pop(end, None)  # re-inserted as the newest
        self._orders[end] = order
        while len(self._orders) > ORDER_MEMORY:
            del self._orders[next(k for k in self._orders if k)]  # oldest first; keep 0
        if order.top >= 0 and (self._last_id is None or order.top > int(self._last_id)):
            self._last_id = ULID.from_int(order.top)

    def _next_id(self, after: ULID | None) -> str:
        new = ULID()
        floor = max((int(i) for i in (after, self._last_id) if i is not None), default=-1)
        if int(new) <= floor:
            new = ULID.from_int(floor + 1)  # same millisecond: stay monotonic
        self._last_id = new
        return str(new)

    def _line_number(self, offset: int) -> int:
        if offset == 0:
            return 0
        with os.fdopen(open_regular(self.path, os.O_RDONLY), "rb") as f:
            return f.read(offset).count(b"\n")


def _write_whole(fd: int, line: bytes) -> None:
    """Append `line` and fsync it, or leave the file as it was: a write cut short (a full
    disk, a file size limit) is truncated back off, so no torn fragment is left to warn at
    every later read. The caller holds the file's lock, so the size is ours to restore."""
    before = os.fstat(fd).st_size
    try:
        written = 0
        while written < len(line):  # a large line may take more than one write
            written += os.write(fd, line[written:])
        os.fsync(fd)
    except BaseException:
        with contextlib.suppress(OSError):  # the write's error is the one to report
            os.ftruncate(fd, before)
            os.fsync(fd)
        raise


def id_order(event_id: str) -> int:
    """An event id's place in the stream's order (ULIDs increase in file order)."""
    return int(ULID.from_str(event_id))


def _tail(fd: int) -> tuple[bool, ULID | None]:
    """Whether the file ends in a torn line, and the id of its last complete line (None if
    it has none, or one that does not decode)."""
    size = os.fstat(fd).st_size
    if size == 0:
        return False, None
    for span in (TAIL_BYTES, MAX_LINE_BYTES + 1):  # most last lines fit the first look
        start = max(0, size - span)
        data = os.pread(fd, size - start, start)
        end = data.rfind(b"\n")
        begin = data.rfind(b"\n", 0, max(end, 0)) + 1
        if begin > 0 or start == 0:
            break
    torn = not data.endswith(b"\n")
    if end < 0:
        return torn, None
    try:
        return torn, ULID.from_str(decode_line(data[begin:end]).id)
    except ValueError:
        return torn, None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
