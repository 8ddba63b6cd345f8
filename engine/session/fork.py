"""Forking a session: a new session that starts from another's state and goes its own way.

The new stream begins with a `forked_from` marker (which session, up to which event), then
holds a copy of the source's events with their ids, so that a copy of the source's snapshot,
anchored at one of them, boots warm in the new session. From there on the two files are
independent. Nothing is re-encoded; the source's files are only read.

A fork may start from another system prompt. The prompt is pinned at the head of the ring,
and every K/V after it was computed with the old one in view: such a fork takes no snapshot
and replays its copy of the conversation (cold) under the new prompt at its first open.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ulid import ULID

from ..errors import ChannelError, UnusableFileError
from ..fileio import create_exclusive, open_regular
from ..paths import SessionFiles, check_session_name
from ..snapshot.archive import generations
from ..snapshot.chain_walk import segment_names
from ..snapshot.segment import chain_dir
from .owner import acquire_session
from .replay import FORKED_FROM, RETRACTS, is_marker
from .rewind import later_turns
from .stream import StreamEvent, StreamLog, _now

COPY_CHUNK = 1 << 20


class ForkError(ChannelError):
    """The fork's files could not be written (a read-only or full data directory); the
    message names the sessions and the reason, and no file of the fork is left behind."""


@dataclass(frozen=True)
class ForkReport:
    source: str
    name: str
    events: int  # the source's events copied
    snapshot_bytes: int  # 0 when the source had no snapshot (the fork then boots cold)
    last_event_id: str | None
    system_changed: bool = False  # it starts from another system prompt, and boots cold
    turn: int | None = None  # it continues from this turn of the source (rewind.py)


def fork_session(data_dir: Path, source: str, name: str, system: str | None = None,
                 check_system: Callable[[str], None] | None = None,
                 turn: int | None = None) -> ForkReport:
    """Create session `name` from `source`'s stream and snapshot; ValueError if `name`
    exists or `source` does not. With `system`, the fork's conversation runs under that
    system prompt instead (checked first by `check_system`, the model template's check).
    With `turn`, it continues from the end of that turn: the later ones are retracted in
    its stream, and its first open restores the newest state saved by then (the source's
    earlier snapshot generations come along as hard links: no bytes copied)."""
    check_session_name(source)
    check_session_name(name)
    if source == name:
        raise ValueError(f"cannot fork session {source!r} onto itself")
    data_dir = Path(data_dir)
    src, new = SessionFiles(data_dir, source), SessionFiles(data_dir, name)
    _check_new(new)
    events = StreamLog(src.stream).read().events
    if not events:
        raise ValueError(f"session {source!r} has no conversation to fork")
    system_changed = system is not None and system != system_prompt(events)
    if system_changed:
        if not system.strip():
            raise ValueError("a fork's system prompt cannot be empty")
        if check_system is not None:
            check_system(system)
        events = with_system_prompt(events, system)
    marker_id = ULID.from_int(int(ULID.from_str(events[0].id)) - 1)
    marker = StreamEvent(str(marker_id), "system", "", _now(),
                         {FORKED_FROM: {"session": source, "event": events[-1].id}})
    lines = [marker.to_json()] + [event.to_json() for event in events]
    if turn is not None:
        retracted, _ = later_turns(events, turn)
        if retracted:  # after every id of the copied lines, as an append gives it
            lines.append(StreamEvent(
                str(ULID.from_int(int(ULID.from_str(events[-1].id)) + 1)), "assistant", "",
                _now(), {"tokens": [], "stop": "retracted", RETRACTS: retracted}).to_json())
    failed = f"cannot fork {source!r} as {name!r}"
    if (unwritable := _unwritable(data_dir)) is not None:  # in words, not "[Errno 30] ..."
        raise ForkError(f"{failed}: {unwritable}")
    try:  # a Channel that opened the new name before its first write must not meet us there
        owner = acquire_session(data_dir, name)
    except UnusableFileError as exc:
        raise ForkError(f"{failed}: {exc}") from None
    with owner:
        report = _write_fork(src, new, lines, failed, data_dir, events, not system_changed,
                             archives=turn is not None)
    return replace(report, system_changed=system_changed, turn=turn)


def system_prompt(events: list[StreamEvent]) -> str | None:
    """The system prompt a stream's conversation runs under (its first message, if that is
    a system one), or None."""
    first = next((e for e in events if not is_marker(e)), None)
    return first.content if first is not None and first.role == "system" else None


def with_system_prompt(events: list[StreamEvent], system: str) -> list[StreamEvent]:
    """The events with their system prompt replaced (it keeps its id, so the lines keep
    their order), or one put in front of them all (an earlier fork's marker holds the id
    just before the first message)."""
    at = next(i for i, e in enumerate(events) if not is_marker(e))
    if events[at].role == "system":
        return [*events[:at], replace(events[at], content=system, ts=_now()), *events[at + 1:]]
    new_id = str(ULID.from_int(int(ULID.from_str(events[0].id)) - 1))
    return [StreamEvent(new_id, "system", system, _now(), {}), *events]


def _write_fork(src: SessionFiles, new: SessionFiles, lines: list[str], failed: str,
                data_dir: Path, events: list[StreamEvent], copy_snapshot: bool,
                archives: bool = False) -> ForkReport:
    """Write the fork's files (the model record and snapshot first, the stream last: a
    session without its stream does not exist); on failure, none is left behind."""
    _check_new(new)  # again, now that no one else may create it
    snapshot_bytes = 0
    copied_settings = False
    try:
        # The fork runs on the source's model: without its record it would open on the
        # default model, refuse the copied snapshot and record the wrong model for good.
        if os.path.lexists(src.model_record):
            _copy_file(src.model_record, new.model_record)
        if os.path.lexists(src.settings):  # the front end's reply settings go along
            _copy_file(src.settings, new.settings)  # over any left from a name never used
            copied_settings = True
        if copy_snapshot and os.path.lexists(src.snapshot):
            snapshot_bytes = _copy_file(src.snapshot, new.snapshot)
            snapshot_bytes += _copy_segments(src.snapshot_chain, new.snapshot_chain)
            if archives:
                _link_archives(src.snapshot, new.snapshot)
        _write_new(new.stream, ("\n".join(lines) + "\n").encode("utf-8"))
    except BaseException as exc:
        # None of these existed before (checked), nor did the settings if we copied them.
        for written in (new.snapshot, new.model_record,
                        *((new.settings,) if copied_settings else ())):
            with contextlib.suppress(OSError):
                written.unlink(missing_ok=True)
        shutil.rmtree(new.snapshot_chain, ignore_errors=True)
        if isinstance(exc, OSError):
            raise ForkError(f"{failed}: {_why(exc, data_dir)}") from None
        if isinstance(exc, UnusableFileError):
            raise ForkError(f"{failed}: {exc}") from None
        raise
    return ForkReport(src.name, new.name, len(events), snapshot_bytes, events[-1].id)


def _check_new(new: SessionFiles) -> None:
    if any(os.path.lexists(p) for p in (new.stream, new.snapshot, new.model_record)):
        raise ValueError(f"session {new.name!r} already exists")


def _unwritable(data_dir: Path) -> str | None:
    """Why no file can be made in `data_dir`, or None when one can."""
    if os.access(data_dir, os.W_OK | os.X_OK):
        return None
    try:
        read_only_fs = bool(os.statvfs(data_dir).f_flag & os.ST_RDONLY)
    except OSError:
        read_only_fs = False
    return _why(OSError(errno.EROFS if read_only_fs else errno.EACCES, ""), data_dir)


def _why(exc: OSError, data_dir: Path) -> str:
    """A write's failure in words a person acts on."""
    if exc.errno == errno.EROFS:
        return f"{data_dir} is read-only (a read-only file system)"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"{data_dir} is read-only (permission denied)"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"no space left for it in {data_dir}"
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


def _link_archives(source: Path, target: Path) -> None:
    """Hard-link the source's earlier snapshot generations into the fork's chain directory
    (files that are never written again once renamed into place). One that cannot be
    linked is left out: the fork then replays from an older state, or the stream."""
    for gen in generations(source):
        archived = chain_dir(target) / gen.base.name
        try:
            chain_dir(target).mkdir(mode=0o700, exist_ok=True)
            chain_dir(archived).mkdir(mode=0o700)
            for name in segment_names(chain_dir(gen.base)):
                os.link(chain_dir(gen.base) / name, chain_dir(archived) / name)
            os.link(gen.base, archived)  # last: a generation exists once its base does
        except OSError:
            shutil.rmtree(chain_dir(archived), ignore_errors=True)


def _copy_segments(source: Path, target: Path) -> int:
    """Copy the snapshot's segments in order; their bytes. One that a compaction removed
    meanwhile ends the copy: the segments before it still extend the copied base, and the
    fork's first open replays the rest of the stream."""
    names = segment_names(source)
    if not names:
        return 0
    target.mkdir(mode=0o700)
    copied = 0
    for name in names:
        try:
            copied += _copy_file(source / name, target / name)
        except FileNotFoundError:
            break
    return copied


def _copy_file(source: Path, target: Path) -> int:
    """Copy through a temporary name and rename: a reader never sees half a snapshot."""
    tmp = target.with_name(target.name + ".tmp")
    copied = 0
    try:
        with os.fdopen(open_regular(source, os.O_RDONLY), "rb") as src, \
                os.fdopen(create_exclusive(tmp, 0o600), "wb") as dst:
            while chunk := src.read(COPY_CHUNK):
                dst.write(chunk)
                copied += len(chunk)
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(OSError):  # never made, in a read-only directory
            tmp.unlink(missing_ok=True)
    return copied


def _write_new(path: Path, data: bytes) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise ValueError(f"session {path.name} already exists") from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
