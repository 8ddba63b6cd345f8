"""Opening and replacing the engine's files safely.

Every file of a session (stream, snapshot and its temporary file) and the engine log is opened
through `open_regular` or `create_exclusive`: a symbolic link is never followed (a planted link
cannot redirect a write outside the data directory), a FIFO cannot block the engine, and
anything but a regular file is refused with one line naming it and why (UnusableFileError).

Replacing a file is atomic: write a temporary file beside it, fsync, rename it over. A reader
(or a process that crashes mid-write) sees the old file or the new one, never a torn one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .errors import UnusableFileError

SAFE_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC
_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket",
          stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFLNK: "a symbolic link (not followed)"}


def describe_os_error(exc: OSError) -> str:
    """A short reason for an OSError, without the path (callers name the file)."""
    reasons = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
               errno.ELOOP: "is a symbolic link (not followed)", errno.EISDIR: "is a directory",
               errno.EACCES: "permission denied", errno.EPERM: "permission denied",
               errno.ENXIO: "is a FIFO or socket with no other end", errno.EEXIST: "exists"}
    return reasons.get(exc.errno, exc.strerror or str(exc))


def open_regular(path: Path, flags: int, mode: int = 0o600) -> int:
    """os.open for a regular file only: no links followed, no blocking on a FIFO. Raises
    FileNotFoundError for a missing file and UnusableFileError for anything else amiss."""
    path = Path(path)
    try:
        fd = os.open(path, flags | SAFE_FLAGS | os.O_NONBLOCK, mode)
    except FileNotFoundError:
        raise  # a missing file means different things to different callers
    except OSError as exc:
        raise UnusableFileError(f"{path.name} {_problem(exc)}") from None
    try:
        kind = stat.S_IFMT(os.fstat(fd).st_mode)
        if kind != stat.S_IFREG:
            raise UnusableFileError(f"{path.name} is {_KINDS.get(kind, 'not a regular file')}")
        os.set_blocking(fd, True)  # O_NONBLOCK only kept a FIFO from blocking the open
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_exclusive(path: Path, mode: int = 0o600, readable: bool = False) -> int:
    """A new file at `path` for writing (and reading, if `readable`). Whatever was there (a
    stale temporary file, or a link planted to redirect the write) is removed first; a link's
    target is never touched. O_EXCL makes a file that reappears in between an error, not a
    write through it."""
    path = Path(path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise UnusableFileError(f"{path.name} {_problem(exc)}") from None
    access = os.O_RDWR if readable else os.O_WRONLY
    try:
        return os.open(path, access | os.O_CREAT | os.O_EXCL | SAFE_FLAGS, mode)
    except OSError as exc:
        raise UnusableFileError(f"{path.name} {_problem(exc)}") from None


def _problem(exc: OSError) -> str:
    reason = describe_os_error(exc)
    return reason if reason.startswith(("is ", "exists")) else f"cannot be used: {reason}"


@contextlib.contextmanager
def atomic_output(path: Path, mode: str = "wb",
                  permissions: int = 0o644) -> Iterator[BinaryIO]:
    """A binary file that becomes `path` when the block ends without an exception.

    Parent directories are created. On a clean exit the file is flushed, fsynced, closed and
    renamed over `path`; on an exception it is closed and deleted and `path` is untouched.
    `mode` is "wb", or "w+b" for a writer that also maps or reads the file. The temporary
    file is named after the target and this process's id, so two processes writing the same
    path do not write into each other's temporary file.
    """
    if mode not in ("wb", "w+b"):
        raise ValueError(f"atomic_output writes binary files from scratch, not mode {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        # The default suits weight images, derived from a public model file: readable by
        # others, like it. A session's files pass 0o600.
        fd = create_exclusive(tmp, permissions, readable=mode == "w+b")
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomically(path: Path, data: bytes, permissions: int = 0o644) -> None:
    """Replace `path` with `data` (see atomic_output)."""
    with atomic_output(path, permissions=permissions) as f:
        f.write(data)
