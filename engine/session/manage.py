"""Managing sessions as files: rename, delete to a trash folder and restore (search.py
searches them).

A session is its files in the data directory (paths.SessionFiles): the stream, the snapshot,
the model record and the front end's settings. Each operation here holds the session's lock
(owner.py) while it moves them, so a session open in any Channel is refused with
SessionBusyError's one line, and no Channel can open it half-moved.

Every move is an os.rename inside the data directory (the trash is a folder in it, so the
same file system): atomic per file. The stream goes last and comes back first on a failure:
a session exists while its stream does, so a failed move leaves the session where it was,
whole. The lock file itself is never moved or deleted (owner.py says why); an empty one is
left under the old name.

A snapshot names its session only as information: a warm boot checks it against the
stream's event ids (snapshot/restore.py), so a renamed session still boots warm.

Only os and the lock are used: the front end may import this module
(tests/test_import_floors.py) without loading numpy.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ChannelError
from ..paths import (
    MODEL_RECORD_SUFFIX,
    SNAPSHOT_SUFFIX,
    STREAM_SUFFIX,
    SessionFiles,
    check_session_name,
    tree_bytes,
)
from .owner import acquire_session

TRASH_DIR = ".trash"  # in the data directory: hidden, and never a session name (no dot first)
# What these operations raise when they refuse or fail, each with a one-line message; a front
# end catches these (it may not import engine.errors itself).
FAILURES = (ChannelError, ValueError, OSError)


class SessionFilesError(ChannelError):
    """A session's files could not be moved; nothing was lost, the message says why."""


@dataclass(frozen=True)
class TrashEntry:
    entry: str  # the folder's name in <data dir>/.trash, as `channel sessions restore` takes it
    name: str  # the session it holds
    path: Path
    deleted_at: float  # the folder's mtime: when it was made
    size_bytes: int


def _moved_files(files: SessionFiles) -> list[Path]:
    """The session's files to move, in order: the stream last (its arrival makes the
    session exist under the new name); the lock stays where it is."""
    return [files.settings, files.model_record, files.snapshot_chain, files.snapshot,
            files.stream]


def _remove_leftover(path: Path) -> None:
    """A settings file, or segments with no base beside them, left under a name whose
    session is gone: nothing reads them, and a move must not fail on them."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        os.unlink(path)


def session_exists(data_dir: Path, name: str) -> bool:
    """Whether `name` has a stream, a snapshot or a model record in `data_dir`."""
    files = SessionFiles(Path(data_dir), name)
    return any(os.path.lexists(p) for p in (files.stream, files.snapshot, files.model_record))


def rename_session(data_dir: Path, old: str, new: str) -> None:
    """Rename session `old` to `new`, every file of it. ValueError for a bad name, a missing
    `old` or an existing `new`; SessionBusyError when either is open in a Channel."""
    check_session_name(old)
    check_session_name(new)
    data_dir = Path(data_dir)
    if old == new:
        raise ValueError(f"session {old!r} already has that name")
    # Both locks: no one writes `old` while it moves, nor opens `new` before it arrives.
    with acquire_session(data_dir, old), acquire_session(data_dir, new):
        if not session_exists(data_dir, old):
            raise ValueError(f"no session {old!r} in {data_dir}")
        if session_exists(data_dir, new):
            raise ValueError(f"session {new!r} already exists")
        _move_all(SessionFiles(data_dir, old), SessionFiles(data_dir, new),
                  f"cannot rename {old!r} to {new!r}")


def delete_session(data_dir: Path, name: str) -> TrashEntry:
    """Move session `name`'s files into <data dir>/.trash/<name>-<time>/, whence
    `restore_deleted` brings them back. ValueError if it does not exist; SessionBusyError
    when it is open in a Channel."""
    check_session_name(name)
    data_dir = Path(data_dir)
    with acquire_session(data_dir, name):
        if not session_exists(data_dir, name):
            raise ValueError(f"no session {name!r} in {data_dir}")
        folder = _new_trash_folder(data_dir, name)
        try:
            _move_all(SessionFiles(data_dir, name), SessionFiles(folder, name),
                      f"cannot delete {name!r}")
        except BaseException:
            with contextlib.suppress(OSError):
                folder.rmdir()  # empty again after the roll-back
            raise
    return _entry(folder, name)


def restore_deleted(data_dir: Path, entry: str) -> str:
    """Move a trash entry's session back into the data directory; its name. ValueError for
    an unknown entry or a name now taken; SessionBusyError when that name is open."""
    data_dir = Path(data_dir)
    found = next((e for e in list_trash(data_dir) if e.entry == entry), None)
    if found is None or "/" in entry or entry.startswith("."):
        raise ValueError(f"no deleted session {entry!r} in {data_dir / TRASH_DIR}")
    with acquire_session(data_dir, found.name):
        if session_exists(data_dir, found.name):
            raise ValueError(f"session {found.name!r} exists again: rename it, then restore")
        _move_all(SessionFiles(found.path, found.name), SessionFiles(data_dir, found.name),
                  f"cannot restore {found.name!r}")
    with contextlib.suppress(OSError):
        found.path.rmdir()
    return found.name


def list_trash(data_dir: Path) -> list[TrashEntry]:
    """The deleted sessions in the data directory's trash, newest first."""
    trash = Path(data_dir) / TRASH_DIR
    try:
        folders = [p for p in trash.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []
    entries = []
    for folder in folders:
        name = _session_in(folder)
        if name is not None:
            entries.append(_entry(folder, name))
    return sorted(entries, key=lambda e: (-e.deleted_at, e.entry))


def empty_trash(data_dir: Path, older_than_s: float = 0.0) -> list[TrashEntry]:
    """Delete for good the trash entries deleted at least `older_than_s` seconds ago; the
    entries removed. SessionFilesError names the first that could not be (those before it
    are gone, those after it untouched)."""
    cutoff = time.time() - older_than_s
    removed = []
    for entry in list_trash(data_dir):
        if entry.deleted_at > cutoff:
            continue
        try:
            shutil.rmtree(entry.path)
        except OSError as exc:
            raise SessionFilesError(f"cannot empty the trash: {entry.entry}: "
                                    f"{exc.strerror or exc}") from None
        removed.append(entry)
    return removed


def _valid(name: str) -> bool:
    try:
        check_session_name(name)
    except ValueError:
        return False
    return True


def _move_all(source: SessionFiles, target: SessionFiles, failed: str) -> None:
    """Rename each of the source's files that exists to the target's name; on a failure
    move the ones already moved back, and raise SessionFilesError."""
    moved: list[tuple[Path, Path]] = []
    try:
        for src, dst in zip(_moved_files(source), _moved_files(target), strict=True):
            if os.path.lexists(src):
                if os.path.lexists(dst):  # a file left from a name never used
                    _remove_leftover(dst)
                os.rename(src, dst)
                moved.append((src, dst))
    except OSError as exc:
        for src, dst in reversed(moved):
            with contextlib.suppress(OSError):
                os.rename(dst, src)
        raise SessionFilesError(f"{failed}: {exc.strerror or exc}") from None


def _new_trash_folder(data_dir: Path, name: str) -> Path:
    trash = data_dir / TRASH_DIR
    stamp = time.strftime("%Y%m%d-%H%M%S")
    try:
        trash.mkdir(mode=0o700, exist_ok=True)
        for n in range(1, 1000):  # two deletes of one name within a second
            folder = trash / (f"{name}-{stamp}" + (f"-{n}" if n > 1 else ""))
            try:
                folder.mkdir(mode=0o700)
            except FileExistsError:
                continue
            return folder
    except OSError as exc:  # a read-only data directory, say
        raise SessionFilesError(f"cannot delete {name!r}: {trash}: "
                                f"{exc.strerror or exc}") from None
    raise SessionFilesError(f"cannot delete {name!r}: too many deletes of it this second")


def _session_in(folder: Path) -> str | None:
    """The name of the session whose files a trash folder holds (None: not one of ours)."""
    for path in folder.iterdir():
        for suffix in (STREAM_SUFFIX, SNAPSHOT_SUFFIX, MODEL_RECORD_SUFFIX):
            if path.name.endswith(suffix) and _valid(path.name[: -len(suffix)]):
                return path.name[: -len(suffix)]
    return None


def _entry(folder: Path, name: str) -> TrashEntry:
    size = 0
    for path in _moved_files(SessionFiles(folder, name)):
        with contextlib.suppress(OSError):
            size += path.lstat().st_size
            if path.is_dir() and not path.is_symlink():  # the snapshot's chain
                size += tree_bytes(path)
    return TrashEntry(folder.name, name, folder, folder.stat().st_mtime, size)
