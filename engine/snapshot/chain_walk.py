"""Walking a snapshot chain: its segments read and validated, on metadata alone, against the
base and each other (docs/snapshot.md, "Chains"). chain.py applies what this accepts;
inspect.py shows it.

Each segment must be whole (size, magic, version, checksum), extend this base, follow its
predecessor (seq, digest, clock), share the base's rebase count, keep the ring's invariants,
and every slot it keeps must be one the state before it had, at the same position. The first
segment that fails ends the chain; its reason is reported, and the prefix before it stands.
The walk also works out, for each live slot, where its row is: the base or one segment.
"""

from __future__ import annotations

import mmap
import os
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash
from ulid import ULID

from ..errors import UnusableFileError
from ..fileio import describe_os_error, open_regular
from ..state.arena import CLOCK, N_ACTIVE, NEXT_POS, REBASES
from .format import (
    KV_DTYPES,
    array_at,
    dtype_code,
    metadata_view,
    parse_code,
    slab_rows,
    unpack_trailer,
)
from .identity import WINDOW_PLANES, PlaneSpec, plane_specs
from .restore import ParsedSnapshot, _close
from .segment import chain_dir
from .segment_format import (
    SEG_TRAILER,
    SEG_TRAILER_MAGIC,
    SegmentChecksumError,
    SegmentCorruptError,
    SegmentError,
    SegmentForeignError,
    SegmentHeader,
    SegmentOrderError,
    SegmentRebaseError,
    SegmentSections,
    SegmentTruncatedError,
    unpack_segment_header,
    window_rows_needed,
)

SEGMENT_NAME = re.compile(r"^(\d{6})\.seg$")


@dataclass
class ParsedSegment:
    path: Path
    header: SegmentHeader
    sections: SegmentSections
    digest: bytes
    mapping: mmap.mmap  # read-only; only ever copied from

    def array(self, name: str) -> np.ndarray:
        """One METADATA section (format.py); a read-only view of the mapping."""
        return metadata_view(self.mapping, self.sections, self.header.n_active, name)

    def rows(self, kind: str, layer: int) -> np.ndarray:
        """(n_dirty, kv_dim) K ("k") or V ("v") rows of one layer, read-only."""
        h = self.header
        dtype, by_dimension = parse_code(h.k_code if kind == "k" else h.v_code)
        count = h.n_dirty * h.kv_dim
        start = self.sections.k_rows if kind == "k" else self.sections.v_rows
        flat = array_at(self.mapping, start + layer * count * dtype.itemsize, dtype, count)
        return slab_rows(flat, h.n_dirty, h.kv_dim, by_dimension)


def read_segment(path: Path, planes) -> ParsedSegment:
    """Map one segment and check its own structure and checksum (nothing about the chain)."""
    try:
        fd = open_regular(path, os.O_RDONLY)
    except (FileNotFoundError, UnusableFileError) as exc:
        raise SegmentTruncatedError(f"cannot be opened: {exc}") from None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            raise SegmentTruncatedError("truncated at byte 0 (empty file)")
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)  # read whole below
        mapping = mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ)
    except OSError as exc:
        raise SegmentTruncatedError(f"cannot be read: {describe_os_error(exc)}") from None
    finally:
        os.close(fd)
    try:
        h = unpack_segment_header(mapping, size)
        s = SegmentSections.plan(h.n_active, h.n_dirty, h.num_layers, h.kv_dim,
                                 KV_DTYPES[h.k_code], parse_code(h.v_code)[0], planes,
                                 h.window_rows)
        if s.size != h.size:
            raise SegmentCorruptError("section offsets disagree with the header's counts")
        magic, stored = SEG_TRAILER.unpack_from(mapping, s.trailer)
        if magic != SEG_TRAILER_MAGIC:
            raise SegmentChecksumError("checksum trailer missing")
        with memoryview(mapping) as whole:
            if xxhash.xxh3_128_digest(whole[: s.trailer]) != stored:
                raise SegmentChecksumError("checksum mismatch")
    except BaseException:
        _close(mapping)
        raise
    return ParsedSegment(Path(path), h, s, bytes(stored), mapping)


@dataclass
class _Walk:
    """The chain's state so far, in metadata only."""

    seq: int
    digest: bytes
    clock: int
    slot_clock: np.ndarray  # (n,) u64 of the state so far
    slot_pos: np.ndarray  # (n,) i32
    source: np.ndarray  # (n,) i32: -1 the base, else the index of the segment holding the row
    row: np.ndarray  # (n,) i64: the row within that source


def _check_link(seg: ParsedSegment, walk: _Walk, base_digest: bytes, rebases: int,
                base_codes: tuple[int, int, int, int], window: int, context_length: int,
                known_ids: Collection[str] | None) -> int:
    """Refuse a segment that does not extend `walk`; returns its first dirty slot."""
    h = seg.header
    match = SEGMENT_NAME.match(seg.path.name)
    if match is None or int(match.group(1)) != h.seq:
        raise SegmentOrderError(f"file name says {seg.path.name}, header says seq {h.seq}")
    if h.base_digest != base_digest:
        raise SegmentForeignError(f"extends another base ({h.base_digest.hex()[:12]}, this "
                                  f"base is {base_digest.hex()[:12]})")
    if h.seq != walk.seq + 1 or h.prev_digest != walk.digest or h.prev_clock != walk.clock:
        raise SegmentOrderError(f"seq {h.seq} from clock {h.prev_clock} does not follow seq "
                                f"{walk.seq} at clock {walk.clock}")
    c = seg.array("counters")
    if h.rebases != rebases or int(c[REBASES]) != rebases:
        raise SegmentRebaseError(f"cut after a rebase ({h.rebases} rebases, base {rebases})")
    if (h.num_layers, h.kv_dim, h.k_code, h.v_code) != base_codes:
        raise SegmentCorruptError("K/V geometry or element codes differ from the base's")
    n, clocks, pos = h.n_active, seg.array("slot_clock"), seg.array("slot_pos").astype(np.int64)
    if int(c[N_ACTIVE]) != n or int(c[CLOCK]) != h.clock or h.dirty_from > h.prev_clock:
        raise SegmentCorruptError(f"counters disagree with the header (n {int(c[N_ACTIVE])}, "
                                  f"clock {int(c[CLOCK])}, dirty from {h.dirty_from})")
    if n and ((np.diff(clocks.astype(np.int64)) <= 0).any() or int(clocks[-1]) > h.clock or
              pos.min() < 0 or (np.diff(pos) <= 0).any() or int(c[NEXT_POS]) <= pos[-1]):
        raise SegmentCorruptError("slot clocks or positions are not increasing")
    if int(c[NEXT_POS]) > context_length or not (seg.array("slot_active") == 1).all() or \
            not np.isfinite(seg.array("slot_salience")).all():
        raise SegmentCorruptError("next position, active flags or salience out of range")
    first_dirty = int(np.searchsorted(clocks, np.uint64(h.dirty_from), side="right"))
    if n - first_dirty != h.n_dirty:
        raise SegmentCorruptError(f"{h.n_dirty} rows carried, {n - first_dirty} stamped "
                                  f"after clock {h.dirty_from}")
    kept = clocks[:first_dirty]
    at = np.searchsorted(walk.slot_clock, kept)
    if (at >= len(walk.slot_clock)).any() or (walk.slot_clock[np.minimum(
            at, len(walk.slot_clock) - 1)] != kept).any() or \
            (walk.slot_pos[np.minimum(at, len(walk.slot_pos) - 1)] != pos[:first_dirty]).any():
        raise SegmentCorruptError("keeps a slot the state before it did not hold there")
    if window and not window_rows_needed(window, h.prev_clock, h.dirty_from, h.clock) <= \
            h.window_rows <= window:
        raise SegmentCorruptError(f"{h.window_rows} window rows carried, too few")
    if h.stream_id:
        try:
            ULID.from_str(h.stream_id)
        except ValueError:
            raise SegmentCorruptError(f"stream anchor {h.stream_id!r} is not a ULID") from None
    if known_ids is not None and h.stream_id not in known_ids:
        raise SegmentCorruptError(f"stream anchor {h.stream_id or '(none)'} is not in the "
                                  "stream")
    return first_dirty


def _advance(walk: _Walk, seg: ParsedSegment, first_dirty: int, index: int) -> _Walk:
    """The walk after `seg`: kept slots keep their sources; the rest come from `seg`."""
    h, clocks = seg.header, seg.array("slot_clock").copy()
    at = np.searchsorted(walk.slot_clock, clocks[:first_dirty])
    source = np.concatenate([walk.source[at], np.full(h.n_dirty, index, np.int32)])
    row = np.concatenate([walk.row[at], np.arange(h.n_dirty)])
    return _Walk(h.seq, seg.digest, h.clock, clocks, seg.array("slot_pos").copy(), source, row)


@dataclass
class ChainWalk:
    """What walk_chain found: the segments that extend the base, in order (mapped: close
    them with close()), where the walk stopped and why, and the state they lead to."""

    base_digest: bytes
    base_anchor: str  # the base's stream anchor
    planes: tuple[PlaneSpec, ...]  # the base's layer planes, in file order
    rebases: int  # the base's; every segment has the same
    segments: list[ParsedSegment]
    ends: list[_Walk]  # the state after the base (0) and after each valid segment (1..)
    stopped: str | None  # "000004.seg: checksum mismatch", or None: every segment is valid
    names: list[str]  # every NNNNNN.seg file, valid or not, in order

    @property
    def anchors(self) -> list[str]:
        """Each link's stream anchor: the base's, then each valid segment's."""
        return [self.base_anchor] + [seg.header.stream_id for seg in self.segments]

    @property
    def ignored(self) -> list[str]:
        """Segment files past the valid prefix."""
        return self.names[len(self.segments):]

    def close(self) -> None:
        for seg in self.segments:
            _close(seg.mapping)


def walk_chain(snap: ParsedSnapshot, context_length: int,
               known_ids: Collection[str] | None = None) -> ChainWalk:
    """Read and check the segments after the validated base `snap`, up to the first one
    that cannot extend the chain. Touches no conversation."""
    digest = unpack_trailer(snap.mapping, snap.sections)
    planes = plane_specs(snap.identity, snap.sections)
    a, s = snap.arrays(), snap.sections
    walk = _Walk(0, digest, snap.header.clock, a["slot_clock"].copy(), a["slot_pos"].copy(),
                 np.full(s.n_active, -1, np.int32), np.arange(s.n_active))
    rebases = int(a["ring_counters"][REBASES])
    codes = (s.n_layers, s.kv_dim, dtype_code(s.k_dtype),
             dtype_code(s.v_dtype, s.v_by_dimension))
    window = next((p.shape[1] for p in planes if p.name in WINDOW_PLANES), 0)
    directory = chain_dir(snap.path)
    names = segment_names(directory)
    chain = ChainWalk(digest, snap.header.stream_id, planes, rebases, [], [walk], None, names)
    for name in names:
        try:
            seg = read_segment(directory / name, planes)
        except SegmentError as exc:
            chain.stopped = f"{name}: {exc}"
            break
        try:
            first_dirty = _check_link(seg, chain.ends[-1], digest, rebases, codes, window,
                                      context_length, known_ids)
        except SegmentError as exc:
            _close(seg.mapping)
            chain.stopped = f"{name}: {exc}"
            break
        chain.segments.append(seg)
        chain.ends.append(_advance(chain.ends[-1], seg, first_dirty, len(chain.segments) - 1))
    return chain


def segment_names(directory: Path) -> list[str]:
    """NNNNNN.seg files in seq order (temporary files and anything else ignored)."""
    try:
        return sorted(e.name for e in os.scandir(directory)
                      if SEGMENT_NAME.match(e.name) and e.is_file(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return []

