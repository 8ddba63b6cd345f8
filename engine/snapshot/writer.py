"""Writing a complete snapshot (seed 000): the base of a chain; restore.py reads it back,
snapshotter.py decides when a save is a complete one and when a segment (segment.py).

Saving takes a *cut* in the engine thread: the small per-slot arrays and counters are copied,
and the ring is frozen so that no eviction or rebase moves the captured K/V rows. A background
thread then streams header, metadata and the K/V slabs straight from the arena views to
`NAME.snapshot.bin.tmp` in 1 MiB writes, hashing as it goes, fsyncs, renames it over
`NAME.snapshot.bin` and fsyncs the directory. Decoding continues meanwhile: new tokens land in
slots past the cut.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import xxhash

from ..conversation import Conversation
from ..fileio import create_exclusive
from ..state.kv_format import stored_by_dimension
from .format import METADATA, SNAPSHOT_VERSION, Header, Sections, pack_body, pack_trailer
from .identity import WINDOW_PLANES, identity_bytes, identity_of, window_to_token_order

WRITE_CHUNK = 1 << 20
Progress = Callable[[int, int], None]


@dataclass
class Cut:
    """A consistent view of the state at one clock value."""

    header: Header
    identity: dict
    sections: Sections
    slot_clock: np.ndarray  # (n,) u64, copied
    slot_pos: np.ndarray  # (n,) i32, copied
    slot_active: np.ndarray  # (n,) u8, copied
    slot_salience: np.ndarray  # (n,) f32, copied
    turn_starts: np.ndarray  # (128,) u64, copied
    sampler_state: np.ndarray  # (6,) u64, copied
    counters: np.ndarray  # (8,) u64, copied
    k_cache: np.ndarray  # (L, S, kv_dim) live view; rows < n are frozen until the write ends
    v_cache: np.ndarray
    # Layer planes outside the ring (hybrid models), copied: every token changes them.
    planes: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def clock(self) -> int:
        return self.header.clock


def take_cut(conv: Conversation, stream_id: str, session: dict | None = None) -> Cut:
    v = conv.arena.views().check()
    ring = conv.ring
    n = ring.n_active
    identity = identity_of(conv)
    identity["ring_policy"] = conv.policy.as_dict()
    identity["backend"] = conv.backend.name
    identity["session"] = session or {}
    header = Header(  # num_layers: the ring's layers, whose K/V slabs follow
        version=SNAPSHOT_VERSION, clock=ring.clock, num_anchors=ring.n_anchors,
        num_layers=conv.model.config.n_full, kv_dim=conv.model.config.kv_dim,
        max_slots=conv.policy.max_slots, total_ingested=ring.total_ingested,
        stream_id=stream_id, turn_boundaries=tuple(ring.turn_boundaries()),
    )
    # The arena's own views, or (snapshot_path "staging": device memory the CPU reads slowly)
    # host-cached copies the backend made on the device. Those are reused by the next call,
    # which cannot come before this write ends (a second save is BUSY until then).
    regions = conv.forward.read_regions(["k_cache", "v_cache", *ring.planes])
    planes = {name: (window_to_token_order(regions[name], ring.clock) if name in WINDOW_PLANES
                     else regions[name].copy()) for name in ring.planes}
    sections = Sections.plan(n, header.num_layers, header.kv_dim, len(identity_bytes(identity)),
                             v.k_cache.dtype, v.v_cache.dtype,
                             sum(plane.nbytes for plane in planes.values()),
                             stored_by_dimension(regions["v_cache"]))
    return Cut(header, identity, sections, v.slot_clock[:n].copy(), v.slot_pos[:n].copy(),
               v.slot_active[:n].copy(), v.slot_salience[:n].copy(), v.turn_starts.copy(),
               v.sampler_state.copy(), v.ring_counters.copy(), regions["k_cache"],
               regions["v_cache"], planes)


def tmp_path_for(path: Path) -> Path:
    """Where a snapshot is written before it is renamed over `path`."""
    return path.with_name(path.name + ".tmp")


class DurableFileWriter:
    """One file written the snapshot way, by a subclass that adds its sections in order:
    to `<path>.tmp` (created exclusively: never through a planted link) through a 1 MiB
    buffer, hashing every byte, then the trailer, fsync, rename over `path` and fsync of
    the directory (`finish`). `state_error` is raised for a call made out of order."""

    state_error: type[RuntimeError] = RuntimeError

    def __init__(self, path: Path, progress: Progress | None = None):
        self.path = Path(path)
        self.tmp = tmp_path_for(self.path)
        self._progress = progress
        self._hash = xxhash.xxh3_128()
        self._written = 0
        self._total = 0  # the whole file, trailer included: set by the first section
        self._state = "open"
        fd = create_exclusive(self.tmp)  # never through a link planted at the .tmp name
        self._file = os.fdopen(fd, "wb", buffering=WRITE_CHUNK)

    def _advance(self, expected: str, to: str, call: str) -> None:
        if self._state != expected:
            raise self.state_error(
                f"{call} called in state {self._state!r} (needs {expected!r})"
            )
        self._state = to

    def _write(self, data) -> None:
        """Bytes, or an array (its rows straight from the arena, when contiguous)."""
        if not isinstance(data, bytes):
            data = np.ascontiguousarray(data)
        view = memoryview(data).cast("B")
        for start in range(0, len(view), WRITE_CHUNK):
            chunk = view[start : start + WRITE_CHUNK]
            self._hash.update(chunk)
            self._file.write(chunk)
            self._written += len(chunk)
            if self._progress is not None:
                self._progress(self._written, self._total)

    def _pad_to(self, offset: int) -> None:
        if offset < self._written:
            raise self.state_error(f"section at {offset} overlaps byte {self._written}")
        self._write(bytes(offset - self._written))

    def _write_metadata(self, sections, cut) -> None:
        """The METADATA sections, copied in the cut, at the sections' offsets."""
        for name in METADATA:
            self._pad_to(getattr(sections, name))
            self._write(getattr(cut, name))

    def _finish(self, trailer_for: Callable[[bytes], bytes]) -> bytes:
        """Pad to the trailer, write it (made from the digest of every byte before it),
        and make the file durable under its name; the digest."""
        trailer = trailer_for(bytes(16))
        self._pad_to(self._total - len(trailer))
        digest = self._hash.digest()
        self._file.write(trailer_for(digest))
        self._written += len(trailer)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self.tmp, self.path)
        fsync_directory(self.path.parent)
        return digest

    def abort(self) -> None:
        self._state = "aborted"
        # Closing flushes; on a full disk that fails again, and the file goes anyway.
        with contextlib.suppress(OSError):
            self._file.close()
        self.tmp.unlink(missing_ok=True)


class SnapshotWriterStateError(RuntimeError):
    pass


class SnapshotWriter(DurableFileWriter):
    """Writes one cut to a temporary file; refuses calls made out of order.

    open -> write_header -> write_metadata -> write_slabs -> commit (or abort at any point).
    """

    state_error = SnapshotWriterStateError

    def write_header(self, cut: Cut) -> None:
        self._advance("open", "header", "write_header")
        self._total = cut.sections.size
        self._write(cut.header.pack())
        self._write(pack_body(cut.sections))
        self._write(identity_bytes(cut.identity))

    def write_metadata(self, cut: Cut) -> None:
        self._advance("header", "metadata", "write_metadata")
        self._write_metadata(cut.sections, cut)

    def write_slabs(self, cut: Cut) -> None:
        self._advance("metadata", "slabs", "write_slabs")
        s = cut.sections
        self._pad_to(s.kv)
        n = s.n_active
        for cache, transpose in ((cut.k_cache, False), (cut.v_cache, s.v_by_dimension)):
            for layer in range(s.n_layers):  # rows straight from the arena, as it stores them
                self._write(cache[layer, :n].T if transpose else cache[layer, :n])
        if cut.planes:
            self._pad_to(s.planes)
            for plane in cut.planes.values():  # in the order the identity lists them
                self._write(plane)

    def commit(self) -> tuple[int, bytes]:
        """Trailer, fsync, rename, fsync the directory; the file's size and digest (a
        chain's segments name the digest of the base they extend)."""
        self._advance("slabs", "committed", "commit")
        digest = self._finish(pack_trailer)
        return self._written, digest


def fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_cut(cut: Cut, path: Path, progress: Progress | None = None) -> tuple[int, bytes]:
    """Write `cut` as the complete snapshot at `path`; its size and digest."""
    writer = SnapshotWriter(path, progress)
    try:
        writer.write_header(cut)
        writer.write_metadata(cut)
        writer.write_slabs(cut)
        return writer.commit()
    except BaseException:
        writer.abort()
        raise
