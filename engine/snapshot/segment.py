"""Writing incremental snapshot segments (docs/snapshot.md, "Chains"); chain.py reads them back.

A segment records what changed since the last durable link of the chain (the base snapshot
or the segment before): the K/V of the slots stamped after `dirty_from` (new tokens, and
tokens that reused clocks after a rollback), the per-slot metadata whole (salience changes
on every pass; 13 bytes a slot), the ring counters, turn starts and sampler state. Rows that
survived since the last link are not written: a restore finds them there by their clock,
wherever an eviction slid them to.

What a segment cannot record, a full (compacted) save must: a rebase (every key re-rotated),
a reset or restore of the arena (a rebuild re-encodes every row), or a chain past a share of
its base. `compaction_reason` says which.

Like writer.py: the small arrays are copied in the cut, the K/V rows come straight from the
arena (the caller freezes the ring until the write ends), 1 MiB buffered writes hashed as
they go, fsync, rename, fsync of the directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..conversation import Conversation
from ..state.arena import TURNS
from ..state.kv_format import stored_by_dimension
from .format import SnapshotError, dtype_code, parse_code
from .identity import WINDOW_PLANES, PlaneSpec
from .segment_format import (
    SEG_TRAILER,
    SEG_TRAILER_MAGIC,
    SegmentHeader,
    SegmentSections,
    segment_plane,
    window_rows_needed,
)
from .writer import DurableFileWriter, fsync_directory

COMPACT_SHARE = 0.5  # a chain past this share of its base's bytes is compacted


def chain_dir(base: Path) -> Path:
    """Where the segments of `NAME.snapshot.bin` live: `NAME.snapshot.d/`."""
    return base.with_name(base.name.removesuffix(".bin") + ".d")


def segment_path(directory: Path, seq: int) -> Path:
    return directory / f"{seq:06d}.seg"


def drop_segments_after(directory: Path, seq: int) -> int:
    """Unlink the segments after `seq` (valid, but holding states the stream took back), so
    that the chain goes on from `seq`; how many went."""
    names = [e.name for e in os.scandir(directory)
             if e.name.endswith(".seg") and e.name[:-4].isdigit() and int(e.name[:-4]) > seq]
    for name in names:
        (directory / name).unlink(missing_ok=True)
    if names:
        fsync_directory(directory)
    return len(names)


def remove_segments(directory: Path) -> int:
    """After a complete save: unlink every segment and unfinished segment in `directory`,
    then make that durable. Files set aside by a restore (`.rejected-*`) are kept. Returns
    how many went; OSError if the directory cannot be read."""
    try:
        names = [e.name for e in os.scandir(directory)
                 if e.name.endswith((".seg", ".seg.tmp")) and not e.is_dir()]
    except FileNotFoundError:
        return 0
    for name in names:
        (directory / name).unlink(missing_ok=True)
    if names:
        fsync_directory(directory)
    return len(names)


@dataclass(frozen=True)
class ChainHead:
    """The last durable link, as the writer needs it to cut the next segment. In memory:
    made by a complete save (snapshotter.py) or a chain restore (chain.py)."""

    base_digest: bytes  # 16 B, the base file's trailer digest
    base_bytes: int
    planes: tuple[PlaneSpec, ...]  # the base's layer planes, in file order
    seq: int  # the last segment's (0: the base itself)
    digest: bytes  # the last link's digest
    clock: int  # the state's clock at the last link
    rebases: int  # the ring's rebase count at the base; a segment needs the same
    generation: int  # the arena generation the last link was cut from (or restored into)
    chain_bytes: int = 0  # bytes of segments so far
    base_anchor: str = ""  # the base's stream anchor (it names the base once archived)


def chain_problem(head: ChainHead | None, conv: Conversation) -> str | None:
    """Why no segment can record the state now (only a complete save can), or None."""
    if head is None:
        return "no base snapshot"
    if conv.arena.generation != head.generation:
        return "the arena was reset or restored since the base"
    if conv.ring.rebases != head.rebases:
        return "the ring rebased its positions since the base"
    return None


def compaction_reason(head: ChainHead | None, conv: Conversation,
                      compact_share: float = COMPACT_SHARE) -> str | None:
    """Why the next save should be a complete one, or None if it can be a segment: a
    segment cannot record the change, or the chain has grown past `compact_share` of its
    base (a restore reads every link; a complete save resets that, and the disk use)."""
    problem = chain_problem(head, conv)
    if problem is None and head.chain_bytes > compact_share * head.base_bytes:
        return f"the chain is {head.chain_bytes * 100 // head.base_bytes}% of its base"
    return problem


@dataclass
class SegmentCut:
    header: SegmentHeader
    sections: SegmentSections
    slot_clock: np.ndarray  # (n,) u64, copied
    slot_pos: np.ndarray  # (n,) i32, copied
    slot_active: np.ndarray  # (n,) u8, copied
    slot_salience: np.ndarray  # (n,) f32, copied
    turn_starts: np.ndarray  # (128,) u64, copied
    sampler_state: np.ndarray  # (6,) u64, copied
    counters: np.ndarray  # (8,) u64, copied
    k_rows: np.ndarray  # (L, n_dirty, kv_dim) live view of the arena; frozen while written
    v_rows: np.ndarray  # (L, n_dirty, kv_dim) likewise
    planes: dict[str, np.ndarray]  # name -> stored rows (window: token order), copied
    rewound_to: int | None  # the ring's watermark read; cleared once the segment is durable

    @property
    def clock(self) -> int:
        return self.header.clock


def take_segment_cut(conv: Conversation, head: ChainHead, stream_id: str,
                     session: dict | None = None) -> SegmentCut:
    """The next segment's cut (engine thread). Refuses, with compaction_reason's words, a
    state only a full save can record. `session`: the facts a base keeps in its identity
    (skipped_tokens, awaiting_reply), carried in the header."""
    reason = chain_problem(head, conv)
    if reason is not None:
        raise SnapshotError(f"needs a full save: {reason}")
    ring, v = conv.ring, conv.arena.views().check()
    n, clock = ring.n_active, ring.clock
    rewound = ring.rewound_to
    dirty_from = head.clock if rewound is None else min(head.clock, rewound)
    first_dirty = int(np.searchsorted(v.slot_clock[:n], np.uint64(dirty_from), side="right"))
    window = next((s.shape[1] for s in head.planes if s.name in WINDOW_PLANES), 0)
    window_rows = window_rows_needed(window, head.clock, dirty_from, clock) if window else 0
    L, kv_dim = conv.model.config.n_full, conv.model.config.kv_dim
    sections = SegmentSections.plan(n, n - first_dirty, L, kv_dim, v.k_cache.dtype,
                                    v.v_cache.dtype, head.planes, window_rows)
    header = SegmentHeader(
        head.seq + 1, head.base_digest, head.digest, head.clock, dirty_from, clock, n,
        n - first_dirty, L, kv_dim, dtype_code(v.k_cache.dtype),
        dtype_code(v.v_cache.dtype, stored_by_dimension(v.v_cache)),
        window_rows, ring.rebases, sections.size, stream_id,
        int((session or {}).get("skipped_tokens", 0)),
        bool((session or {}).get("awaiting_reply", False)))
    # Only the carried rows: a staging backend (a GPU) copies just those off the device.
    regions = conv.forward.read_regions(["k_cache", "v_cache", *ring.planes],
                                        rows=(first_dirty, n))
    planes = {}
    for spec in head.planes:
        stored = segment_plane(spec, window_rows)
        if spec.name in WINDOW_PLANES:  # the token stamped c sits in row (c - 1) % window
            rows = (np.arange(clock - window_rows, clock) % spec.shape[1])
            planes[spec.name] = regions[spec.name][:, rows]  # fancy index: a copy
        else:
            planes[spec.name] = regions[spec.name].copy()
        assert planes[spec.name].shape == stored.shape
    return SegmentCut(header, sections, v.slot_clock[:n].copy(), v.slot_pos[:n].copy(),
                      v.slot_active[:n].copy(), v.slot_salience[:n].copy(),
                      v.turn_starts.copy(), v.sampler_state.copy(), v.ring_counters.copy(),
                      regions["k_cache"], regions["v_cache"],
                      planes, rewound)


class SegmentWriterStateError(RuntimeError):
    pass


class SegmentWriter(DurableFileWriter):
    """Writes one segment cut to `NNNNNN.seg.tmp`; refuses calls made out of order.

    open -> write_header -> write_metadata -> write_rows -> commit (or abort at any point).
    """

    state_error = SegmentWriterStateError

    def write_header(self, cut: SegmentCut) -> None:
        self._advance("open", "header", "write_header")
        self._total = cut.sections.size
        self._write(cut.header.pack())

    def write_metadata(self, cut: SegmentCut) -> None:
        self._advance("header", "metadata", "write_metadata")
        self._write_metadata(cut.sections, cut)

    def write_rows(self, cut: SegmentCut) -> None:
        self._advance("metadata", "rows", "write_rows")
        self._pad_to(cut.sections.k_rows)
        by_dimension = parse_code(cut.header.v_code)[1]
        for rows, transpose in ((cut.k_rows, False), (cut.v_rows, by_dimension)):
            for layer in rows:  # (n_dirty, kv_dim): contiguous, straight from the arena
                self._write(layer.T if transpose else layer)  # as stored: (kv_dim, n_dirty)
        for name, (offset, _) in cut.sections.planes.items():
            self._pad_to(offset)
            self._write(cut.planes[name])

    def commit(self) -> bytes:
        """Trailer, fsync, rename, fsync the directory; returns the segment's digest."""
        self._advance("rows", "committed", "commit")
        return self._finish(lambda digest: SEG_TRAILER.pack(SEG_TRAILER_MAGIC, digest))


def write_segment(cut: SegmentCut, head: ChainHead, directory: Path) -> ChainHead:
    """Write `cut` as the chain's next segment; returns the new head. The caller holds the
    ring frozen from the cut until this returns (rows in the cut are live views)."""
    directory.mkdir(mode=0o700, exist_ok=True)
    writer = SegmentWriter(segment_path(directory, cut.header.seq))
    try:
        writer.write_header(cut)
        writer.write_metadata(cut)
        writer.write_rows(cut)
        digest = writer.commit()
    except BaseException:
        writer.abort()
        raise
    return replace(head, seq=cut.header.seq, digest=digest, clock=cut.header.clock,
                   chain_bytes=head.chain_bytes + cut.sections.size)


def save_segment(conv: Conversation, head: ChainHead, directory: Path,
                 stream_id: str) -> ChainHead:
    """Cut and write a segment synchronously (the integration runs write_segment on the
    snapshot thread instead)."""
    cut = take_segment_cut(conv, head, stream_id)
    conv.ring.freeze()
    try:
        head = write_segment(cut, head, directory)
        if conv.ring.rewound_to == cut.rewound_to:  # durable now: nothing before it to carry
            conv.ring.rewound_to = None
        return head
    finally:
        conv.ring.thaw()


def turn_of(counters: np.ndarray) -> int:
    """The turn count a segment's counters record (for inspect)."""
    return int(counters[TURNS])
