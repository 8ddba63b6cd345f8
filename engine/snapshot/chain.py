"""Reading a snapshot chain back: the base, then its segments, validated in full before any
live state is touched, and applied as the longest valid prefix (docs/snapshot-chain.md).

Validation walks the chain on the small metadata alone (a few KB a segment): each segment
must be whole (size, magic, version, checksum), extend this base, follow its predecessor
(seq, digest, clock), share the base's rebase count, keep the ring's invariants, and every
slot it keeps must be one the state before it had, at the same position. The first segment
that fails ends the chain; its reason is reported and the prefix before it is restored.

Applying then copies each surviving K/V row once: a row's source (the base or one segment)
is worked out across the whole chain first, so 50 segments cost one pass over the ring.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import xxhash
from ulid import ULID

from ..conversation import Conversation
from ..errors import UnusableFileError
from ..fileio import describe_os_error, open_regular
from ..state.arena import CLOCK, MAX_TURN_BOUNDARIES, N_ACTIVE, NEXT_POS, REBASES, SAMPLER_WORDS
from .format import COUNTER_WORDS, KV_DTYPES, SnapshotCorruptError, array_at, unpack_trailer
from .identity import WINDOW_PLANES, plane_specs
from .restore import check_compatible, copy_base_into, read_snapshot
from .segment import COMPACT_SHARE, ChainHead, chain_dir
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
        """One metadata section: slot_* (n,), turn_starts (128,), sampler_state (6,),
        counters (8,); a read-only view of the mapping."""
        n = self.header.n_active
        dtype, count = {"slot_clock": (np.uint64, n), "slot_pos": (np.int32, n),
                        "slot_active": (np.uint8, n), "slot_salience": (np.float32, n),
                        "turn_starts": (np.uint64, MAX_TURN_BOUNDARIES),
                        "sampler_state": (np.uint64, SAMPLER_WORDS),
                        "counters": (np.uint64, COUNTER_WORDS)}[name]
        return array_at(self.mapping, getattr(self.sections, name), dtype, count)

    def rows(self, kind: str, layer: int) -> np.ndarray:
        """(n_dirty, kv_dim) K ("k") or V ("v") rows of one layer, read-only."""
        h = self.header
        dtype = KV_DTYPES[h.k_code if kind == "k" else h.v_code]
        count = h.n_dirty * h.kv_dim
        start = self.sections.k_rows if kind == "k" else self.sections.v_rows
        return array_at(self.mapping, start + layer * count * dtype.itemsize, dtype,
                        count).reshape(h.n_dirty, h.kv_dim)


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
        mapping = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    except OSError as exc:
        raise SegmentTruncatedError(f"cannot be read: {describe_os_error(exc)}") from None
    finally:
        os.close(fd)
    try:
        h = unpack_segment_header(mapping, size)
        s = SegmentSections.plan(h.n_active, h.n_dirty, h.num_layers, h.kv_dim,
                                 KV_DTYPES[h.k_code], KV_DTYPES[h.v_code], planes,
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


@dataclass
class ChainReport:
    clock: int
    n_active: int
    stream_id: str  # the anchor: the last stream event the restored state includes
    session: dict  # the base identity's session facts, updated by the last segment
    segments: int  # applied
    bytes: int  # base + applied segments
    stopped: str | None  # "000004.seg: checksum mismatch", or None: the whole chain
    head: ChainHead
    validate_ms: float
    copy_ms: float
    ignored: list[str] = field(default_factory=list)  # segment files past the valid prefix

    @property
    def restore_ms(self) -> float:
        return self.validate_ms + self.copy_ms


def restore(conv: Conversation, base: Path, known_ids: Collection[str] | None = None,
            compact_share: float = COMPACT_SHARE) -> ChainReport:
    """Validate base + segments, then make the longest valid prefix the conversation's
    state. Raises SnapshotError (conversation untouched) only if the base is unusable. With
    `known_ids`, every link's stream anchor must be one of them."""
    t0 = time.perf_counter()
    base = Path(base)
    snap = read_snapshot(base)
    segments: list[ParsedSegment] = []
    try:
        check_compatible(snap, conv)
        if known_ids is not None and snap.header.stream_id not in known_ids:
            raise SnapshotCorruptError(
                f"stream anchor {snap.header.stream_id or '(none)'} is not in the stream")
        digest = unpack_trailer(snap.mapping, snap.sections)
        planes = plane_specs(snap.identity, snap.sections)
        a = snap.arrays()
        n0 = snap.sections.n_active
        walk = _Walk(0, digest, snap.header.clock, a["slot_clock"].copy(),
                     a["slot_pos"].copy(), np.full(n0, -1, np.int32), np.arange(n0))
        rebases = int(a["ring_counters"][REBASES])
        s = snap.sections
        codes = (s.n_layers, s.kv_dim, _code(s.k_dtype), _code(s.v_dtype))
        window = next((p.shape[1] for p in planes if p.name in WINDOW_PLANES), 0)
        context = conv.model.config.context_length
        names = segment_names(chain_dir(base))
        stopped = None
        for name in names:
            try:
                seg = read_segment(chain_dir(base) / name, planes)
            except SegmentError as exc:
                stopped = f"{name}: {exc}"
                break
            try:
                first_dirty = _check_link(seg, walk, digest, rebases, codes, window, context,
                                          known_ids)
            except SegmentError as exc:
                _close(seg.mapping)
                stopped = f"{name}: {exc}"
                break
            segments.append(seg)
            walk = _advance(walk, seg, first_dirty, len(segments) - 1)
        t1 = time.perf_counter()
        copy_base_into(snap, conv)
        _apply(conv, segments, walk, planes)
        t2 = time.perf_counter()
        session = dict(snap.identity.get("session", {}))
        last = segments[-1].header if segments else None
        if last is not None:
            session.update(skipped_tokens=last.skipped_tokens,
                           awaiting_reply=last.awaiting_reply)
        head = ChainHead(digest, snap.size, planes, walk.seq, walk.digest, walk.clock, rebases,
                         conv.arena.generation, sum(g.header.size for g in segments),
                         compact_share)
        return ChainReport(walk.clock, len(walk.slot_clock),
                           last.stream_id if last else snap.header.stream_id, session,
                           len(segments), snap.size + head.chain_bytes, stopped, head,
                           (t1 - t0) * 1e3, (t2 - t1) * 1e3, names[len(segments):])
    finally:
        _close(snap.mapping)
        for seg in segments:
            _close(seg.mapping)


def _advance(walk: _Walk, seg: ParsedSegment, first_dirty: int, index: int) -> _Walk:
    """The walk after `seg`: kept slots keep their sources; the rest come from `seg`."""
    h, clocks = seg.header, seg.array("slot_clock").copy()
    at = np.searchsorted(walk.slot_clock, clocks[:first_dirty])
    source = np.concatenate([walk.source[at], np.full(h.n_dirty, index, np.int32)])
    row = np.concatenate([walk.row[at], np.arange(h.n_dirty)])
    return _Walk(h.seq, seg.digest, h.clock, clocks, seg.array("slot_pos").copy(), source, row)


def _apply(conv: Conversation, segments: list[ParsedSegment], walk: _Walk, planes) -> None:
    """Copy the chain's end state into an arena that holds the base's (after copy_base_into)."""
    if not segments:
        return
    v, last = conv.arena.views(), segments[-1]
    n = last.header.n_active
    # Base rows surviving to the end form a prefix, in clock order and slid down only
    # (eviction compacts toward slot 0), so a gather from the arena itself is enough.
    from_base = int(np.count_nonzero(walk.source == -1))
    src = walk.row[:from_base]
    moved = bool(from_base) and not np.array_equal(src, np.arange(from_base))
    # Each segment's survivors are one contiguous run of slots: a segment's rows are stamped
    # after everything it kept, and a later segment keeps only rows older than its own.
    runs = [(seg, np.flatnonzero(walk.source == index)) for index, seg in enumerate(segments)]
    runs = [(seg, dest[0], dest[-1] + 1, walk.row[dest]) for seg, dest in runs if dest.size]
    for layer in range(v.k_cache.shape[0]):
        if moved:  # fancy indexing copies first, so the overlapping move is safe
            v.k_cache[layer, :from_base] = v.k_cache[layer, src]
            v.v_cache[layer, :from_base] = v.v_cache[layer, src]
        for seg, start, end, rows in runs:  # f16 <-> f32 converted by the copy if need be
            np.copyto(v.k_cache[layer, start:end], seg.rows("k", layer)[rows])
            np.copyto(v.v_cache[layer, start:end], seg.rows("v", layer)[rows])
    for name in ("slot_clock", "slot_pos", "slot_active", "slot_salience"):
        target = getattr(v, name)
        np.copyto(target[:n], last.array(name))
        target[n:] = 0
    for name, section in (("turn_starts", "turn_starts"), ("sampler_state", "sampler_state"),
                          ("ring_counters", "counters")):
        np.copyto(getattr(v, name), last.array(section))
    for seg in segments:  # window rows in order: a later segment overwrites an earlier's
        for spec in planes:
            offset, stored = seg.sections.planes[spec.name]
            data = array_at(seg.mapping, offset, stored.dtype,
                            stored.nbytes // stored.dtype.itemsize).reshape(stored.shape)
            if spec.name in WINDOW_PLANES:  # token stamped c sits in row (c - 1) % window
                clock, count = seg.header.clock, stored.shape[1]
                getattr(v, spec.name)[:, np.arange(clock - count, clock) % spec.shape[1]] = data
            else:
                np.copyto(getattr(v, spec.name), data)
    views = conv.arena.invalidate()
    conv.sampler.load_state(views)
    conv.last_logits = None


def set_aside(base: Path, names: list[str]) -> str:
    """Rename segments a restore stopped before (`NNNNNN.seg.rejected-<time>`): kept for a
    look, never read again, and out of the way of the segments the next saves write."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    directory = chain_dir(base)
    try:
        for name in names:
            os.rename(directory / name, directory / f"{name}.rejected-{stamp}")
    except OSError as exc:
        return f"could not be set aside ({describe_os_error(exc)})"
    return f"kept as *.rejected-{stamp}"


def segment_names(directory: Path) -> list[str]:
    """NNNNNN.seg files in seq order (temporary files and anything else ignored)."""
    try:
        return sorted(e.name for e in os.scandir(directory)
                      if SEGMENT_NAME.match(e.name) and e.is_file(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _code(dtype: np.dtype) -> int:
    return next(code for code, known in KV_DTYPES.items() if known == dtype)


def _close(mapping: mmap.mmap) -> None:
    with contextlib.suppress(BufferError):
        mapping.close()
