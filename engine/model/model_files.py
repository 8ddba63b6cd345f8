"""The files a loaded model keeps reading, checked so that a change on disk ends a turn with
an error instead of killing the process.

Weights are read through shared mappings: ggml maps the GGUF itself, numpy the weight image in
the cache. Truncating a mapped file in place (a re-download into the same file) makes every
read of a page past its new end raise SIGBUS, which no Python code can catch: the engine died
without an error event or a log line. So before a turn touches the weights the session asks
the model to check:

- a mapped file that is now shorter than its mapping (asked of the mapped inode itself,
  through the mapping's own descriptor, whatever the path names now) is an error;
- the GGUF, where it is mapped, changed in place (same inode, another size or mtime) and its
  bytes no longer the ones loaded (fingerprinted again, so a `touch` is no error): an error;
- the GGUF replaced by a rename (a new inode at its path) or removed: the old mapping stays
  whole, so the engine runs on what it loaded and says so once in a warning. Where the GGUF
  is not mapped (numpy, Vulkan), any change to its bytes is such a warning.

`guard` is the cheap half (the sizes alone), run before every forward pass as a backstop for
a file truncated after the turn's check. A file truncated during a pass can still kill the
process: that window is not closed.
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelFileChangedError
from .gguf_file import fingerprint_file


@dataclass(frozen=True)
class FileIdentity:
    """What says a file is the one we read: its inode, size and modification time."""

    dev: int
    ino: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    @classmethod
    def at(cls, path: Path) -> FileIdentity | None:
        """The identity of the file at `path` now, or None when there is none."""
        try:
            return cls.of(os.stat(path))
        except OSError:
            return None

    def same_inode(self, other: FileIdentity) -> bool:
        return (self.dev, self.ino) == (other.dev, other.ino)


@dataclass
class _Mapped:
    label: str  # "model file" or "weight image"
    remedy: str  # what puts it right, for the error message
    path: Path
    mapping: weakref.ref  # the mmap; dead once the weights that hold it are let go
    length: int  # bytes mapped
    # The whole GGUF's identity as mapped, checked for changes in place; None: the size alone.
    identity: FileIdentity | None


class ModelFiles:
    """The GGUF a model was loaded from and the mappings its weights are read through."""

    def __init__(self, source: Path, loaded: FileIdentity, fingerprint: str):
        self.source = source
        self.loaded = loaded  # the GGUF as it was when fingerprinted
        self.fingerprint = fingerprint  # gguf_file.fingerprint_file's, of those bytes
        self._mapped: list[_Mapped] = []
        self._warned: FileIdentity | str | None = None  # what the last warning was about
        self._lock = threading.Lock()

    def watch_mapping(self, mapping: mmap.mmap, path: Path, label: str, remedy: str,
                      identity: FileIdentity | None = None) -> None:
        """Check `mapping` of `path` before each turn. With `identity` (the GGUF as it was
        mapped, whole), a change in place to other bytes is an error too."""
        with self._lock:
            self._mapped.append(_Mapped(label, remedy, path, weakref.ref(mapping),
                                        len(mapping), identity))

    def guard(self) -> None:
        """Raise ModelFileChangedError if a mapped file is now shorter than its mapping."""
        for mapped, mapping in self._live():
            try:
                size = mapping.size()  # fstat of the mapped inode, not of the path
            except (OSError, ValueError):  # closed meanwhile: nothing left to read
                continue
            if size < mapped.length:
                raise ModelFileChangedError(
                    f"{mapped.label} truncated while in use (now {size:,} of "
                    f"{mapped.length:,} bytes; {mapped.remedy}): {mapped.path}")

    def check(self) -> list[str]:
        """`guard`, and a mapped GGUF changed in place is an error; returns a warning, once,
        when the GGUF was replaced or removed and the engine runs on what it loaded."""
        self.guard()
        for mapped, _ in self._live():
            now = FileIdentity.at(mapped.path)
            if (mapped.identity is None or now is None or not now.same_inode(mapped.identity)
                    or now == mapped.identity):
                continue
            if not self._same_bytes(mapped.path, now):
                raise ModelFileChangedError(
                    f"{mapped.label} changed in place while in use ({mapped.remedy}): "
                    f"{mapped.path}")
            mapped.identity = now  # rewritten with the same bytes, or touched
            self.loaded = now  # _same_bytes is of the source: no second fingerprint below
        now = FileIdentity.at(self.source)
        if now == self.loaded:
            return []
        if now is not None and now.same_inode(self.loaded) and self._same_bytes(self.source, now):
            self.loaded = now
            return []
        seen: FileIdentity | str = now if now is not None else "removed"
        with self._lock:
            if seen == self._warned:
                return []
            self._warned = seen
        what = "removed from disk" if now is None else "changed on disk"
        return [f"model file {what}; this engine keeps running on the model it loaded "
                f"(restart Channel to load the file anew): {self.source}"]

    def _same_bytes(self, path: Path, now: FileIdentity) -> bool:
        """Whether the GGUF at `path` (its identity `now`) still holds the bytes loaded: a
        fingerprint (~10 ms per 100 MB), taken only when its size or mtime moved."""
        if path != self.source or now.size != self.loaded.size:
            return False
        try:
            return fingerprint_file(path) == self.fingerprint
        except OSError:
            return False

    def _live(self) -> list[tuple[_Mapped, mmap.mmap]]:
        with self._lock:
            live = [(m, mapping) for m in self._mapped
                    if (mapping := m.mapping()) is not None and not mapping.closed]
            self._mapped = [m for m, _ in live]
        return live
