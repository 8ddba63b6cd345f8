"""Replacing a file atomically: write a temporary file beside it, fsync, rename it over.

A reader (or a process that crashes mid-write) sees the old file or the new one, never a torn
one. The temporary file is named after the target and this process's id, so two processes
writing the same path do not write into each other's temporary file; it is removed on failure.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


@contextlib.contextmanager
def atomic_output(path: Path, mode: str = "wb") -> Iterator[BinaryIO]:
    """A binary file that becomes `path` when the block ends without an exception.

    Parent directories are created. On a clean exit the file is flushed, fsynced, closed and
    renamed over `path`; on an exception it is closed and deleted and `path` is untouched.
    `mode` is "wb", or "w+b" for a writer that also maps or reads the file.
    """
    if mode not in ("wb", "w+b"):
        raise ValueError(f"atomic_output writes binary files from scratch, not mode {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        with open(tmp, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` (see atomic_output)."""
    with atomic_output(path) as f:
        f.write(data)
