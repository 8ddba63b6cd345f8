"""One writer per session: the OS lock on `NAME.lock` that whoever opens a session holds.

Two programs writing one session each take the other's messages for new input and answer
them, and anchor their snapshots at events they fed out of order (issue 31). So the engine
and `channel chat` take an exclusive flock(2) on the session's lock file before they boot it
and hold it while the session is open; a second opener is refused with SessionBusyError,
naming the holder's pid. `channel send` appends without the lock: it is the one way to add
to a session that another Channel holds (the holder answers it).

The kernel drops a flock when the last descriptor of its open file is closed, so a holder
that crashes or is killed (SIGKILL included) never leaves a stale lock. The file itself is
never deleted: another opener may have it open already, and would then lock a file no one
else can find while a third creates a new one and locks that.

A flock belongs to the open file description, not to the process: a second acquire in the
same process, on a new descriptor, is refused too. Programs that only read a session (the
boot comparison, the benchmarks) boot it without the lock.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import BinaryIO

from ..errors import SessionBusyError, UnusableFileError
from ..fileio import describe_os_error, open_regular
from ..paths import SessionFiles, check_session_name

# How long a refused opener waits for the holder's pid: the holder writes it just after it
# locks, so a refusal in between would otherwise name no one.
HOLDER_PID_WAIT_S = 0.5


class SessionLock:
    """Session `name`'s lock, held until `release()` (or the end of a `with` block). The
    file object closes, and so releases, the lock if it is dropped unreleased."""

    def __init__(self, name: str, path: Path, file: BinaryIO):
        self.name = name
        self.path = path
        self._file: BinaryIO | None = file

    @property
    def held(self) -> bool:
        return self._file is not None

    def release(self) -> None:
        """Give the lock back (again: nothing). The file stays, emptied of our pid."""
        file, self._file = self._file, None
        if file is None:
            return
        try:
            os.ftruncate(file.fileno(), 0)  # our pid must not outlive our hold
        except OSError:
            pass  # only informative: the next holder writes its own
        finally:
            file.close()

    def __enter__(self) -> SessionLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def acquire_session(data_dir: Path, name: str) -> SessionLock:
    """Lock session `name` in `data_dir` for this process's writing. Raises SessionBusyError
    when another holds it, UnusableFileError when the lock file cannot be used or locked."""
    path = SessionFiles(Path(data_dir), check_session_name(name)).lock
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = open_regular(path, os.O_RDWR | os.O_CREAT, 0o600)
    except FileNotFoundError as exc:  # the directory went away in between
        raise UnusableFileError(f"{path.name} cannot be created: {exc.strerror}") from None
    file = os.fdopen(fd, "r+b", buffering=0)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # another open file holds it
        pid = _holder_pid(fd)
        file.close()
        raise SessionBusyError(name, pid) from None
    except OSError as exc:  # say, a file system without locks: one writer is not assured
        file.close()
        raise UnusableFileError(
            f"{path.name} cannot be locked: {describe_os_error(exc)}") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    except OSError:
        pass  # a full disk: the lock holds all the same; a refusal just names no pid
    return SessionLock(name, path, file)


def _holder_pid(fd: int) -> int | None:
    """The pid the holder wrote into the lock file, waiting briefly for one that has just
    locked; None if none appears."""
    deadline = time.monotonic() + HOLDER_PID_WAIT_S
    while True:
        try:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        except OSError:
            return None
        if text.isdigit():
            return int(text)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)
