"""The byte layout of one chain segment (docs/snapshot.md, "Chains"): what changed in a
conversation's state since the link before it. No I/O policy here (segment.py writes,
chain.py reads, validates and applies).

    0       SegmentHeader     192 B  magic, version, seq, the base's and predecessor's digests,
                                     clock range, counts, element codes, stream anchor
    192     slot metadata        -   clock u64[n], pos i32[n], active u8[n], salience f32[n]:
                                     whole (small), because salience changes on every pass
    ...     ring state           -   turn_starts u64[128], sampler_state u64[6], counters u64[8]
    kv      K rows, V rows       -   [L][n_dirty][kv_dim] each: the slots stamped after
                                     dirty_from, i.e. the last n_dirty live slots, 64-aligned;
                                     version 2: V rows may be [L][kv_dim][n_dirty], flagged
                                     as a snapshot's are (format.py BY_DIMENSION)
    ...     layer planes         -   hybrid models: window planes' newest window_rows rows
                                     (token order), conv carries whole, 64-aligned
    end-24  trailer           24 B   b"SEGSUM\\0\\0" + xxh3-128 of every byte before it

All integers little-endian. Every failure raises a SegmentError subclass with a one-line
message, so a restore can say why it stopped where it did.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from ..align import align_up
from .format import KV_ALIGN, KV_DTYPES, MAX_STREAM_ID, SnapshotError, parse_code, plan_metadata
from .identity import WINDOW_PLANES, PlaneSpec

SEGMENT_MAGIC = b"SNAPSEG\0"
SEGMENT_VERSION = 2
READABLE_SEGMENT_VERSIONS = (1, 2)
# magic, version, header size, seq, base digest, prev digest, prev_clock, dirty_from, clock,
# n_active, n_dirty, num_layers, kv_dim, K code, V code, stream_id_len, window_rows,
# rebases, size, stream_id, skipped_tokens, awaiting_reply, reserved
SEG_HEADER = struct.Struct(f"<8sIIQ16s16sQQQIIIIBBHIQQ{MAX_STREAM_ID}sIB3x")
SEG_TRAILER_MAGIC = b"SEGSUM\0\0"
SEG_TRAILER = struct.Struct("<8s16s")
DIGEST_BYTES = 16

assert SEG_HEADER.size == 192 and SEG_TRAILER.size == 24


class SegmentError(SnapshotError):
    """A segment cannot extend the chain; the message says why in one line."""


class SegmentTruncatedError(SegmentError):
    pass


class SegmentMagicError(SegmentError):
    pass


class SegmentVersionError(SegmentError):
    pass


class SegmentChecksumError(SegmentError):
    pass


class SegmentForeignError(SegmentError):
    """Extends another base (left by a compaction, or copied in from elsewhere)."""


class SegmentOrderError(SegmentError):
    """Not the successor of the link before it (wrong seq, predecessor digest or clock)."""


class SegmentRebaseError(SegmentError):
    """Cut after a rebase: every key changed, which only a full save can record."""


class SegmentCorruptError(SegmentError):
    """Fields contradict each other, the base, or the state they extend."""


@dataclass(frozen=True)
class SegmentHeader:
    seq: int  # 1 for the first segment after the base
    base_digest: bytes  # the base file's trailer digest (16 B)
    prev_digest: bytes  # the predecessor segment's digest; the base's for seq 1
    prev_clock: int  # the clock of the state this segment extends
    dirty_from: int  # slots (and window rows) stamped after this clock are carried
    clock: int  # the clock of the state after applying it
    n_active: int
    n_dirty: int
    num_layers: int
    kv_dim: int
    k_code: int
    v_code: int  # with format.py's BY_DIMENSION flag where V rows are stored by dimension
    window_rows: int
    rebases: int
    size: int  # the whole segment, trailer included
    stream_id: str  # the last stream event the state includes
    # The session facts a base keeps in its identity's "session" entry, which change
    # between saves: tokens a replay left out, and whether a message awaits its reply.
    skipped_tokens: int = 0
    awaiting_reply: bool = False

    def pack(self) -> bytes:
        sid = self.stream_id.encode("ascii")
        if len(sid) > MAX_STREAM_ID:
            raise ValueError(f"stream id longer than {MAX_STREAM_ID} bytes")
        return SEG_HEADER.pack(
            SEGMENT_MAGIC, SEGMENT_VERSION, SEG_HEADER.size, self.seq, self.base_digest,
            self.prev_digest, self.prev_clock, self.dirty_from, self.clock, self.n_active,
            self.n_dirty, self.num_layers, self.kv_dim, self.k_code, self.v_code, len(sid),
            self.window_rows, self.rebases, self.size, sid, min(self.skipped_tokens, 2**32 - 1),
            int(self.awaiting_reply))


def unpack_segment_header(data: bytes | memoryview, actual_size: int) -> SegmentHeader:
    if actual_size < SEG_HEADER.size:
        raise SegmentTruncatedError(
            f"truncated at byte {actual_size} (header needs {SEG_HEADER.size})")
    (magic, version, header_size, seq, base, prev, prev_clock, dirty_from, clock, n, n_dirty,
     layers, kv_dim, k_code, v_code, sid_len, window_rows, rebases, size,
     sid, skipped, awaiting) = SEG_HEADER.unpack_from(data, 0)
    if magic != SEGMENT_MAGIC:
        raise SegmentMagicError(f"not a segment (magic {bytes(magic)!r})")
    if version not in READABLE_SEGMENT_VERSIONS:
        raise SegmentVersionError(f"segment version {version} unsupported (reads 1 and 2)")
    if header_size != SEG_HEADER.size or sid_len > MAX_STREAM_ID:
        raise SegmentCorruptError(f"header size {header_size}, stream_id_len {sid_len}")
    if actual_size < size:
        raise SegmentTruncatedError(f"truncated at byte {actual_size} of {size}")
    if actual_size > size:
        raise SegmentCorruptError(f"{actual_size - size} unexpected bytes after the trailer")
    if awaiting > 1:
        raise SegmentCorruptError(f"awaiting_reply flag {awaiting} is neither 0 nor 1")
    values = parse_code(v_code)
    if n_dirty > n or k_code not in KV_DTYPES or values is None or (values[1] and version < 2):
        raise SegmentCorruptError(f"{n_dirty} dirty of {n} slots, element codes "
                                  f"{k_code}/{v_code}")
    try:
        stream_id = bytes(sid[:sid_len]).decode("ascii")
    except UnicodeDecodeError:
        raise SegmentCorruptError("stream_id is not ASCII") from None
    return SegmentHeader(seq, bytes(base), bytes(prev), prev_clock, dirty_from, clock, n,
                         n_dirty, layers, kv_dim, k_code, v_code, window_rows, rebases, size,
                         stream_id, skipped, bool(awaiting))


@dataclass(frozen=True)
class SegmentSections:
    """Absolute offsets of every section of a segment."""

    slot_clock: int
    slot_pos: int
    slot_active: int
    slot_salience: int
    turn_starts: int
    sampler_state: int
    counters: int
    k_rows: int  # K rows [L][n_dirty][kv_dim], then V rows
    v_rows: int
    planes: dict[str, tuple[int, PlaneSpec]]  # name -> (offset, the rows stored)
    trailer: int
    size: int

    @staticmethod
    def plan(n: int, n_dirty: int, n_layers: int, kv_dim: int, k_dtype: np.dtype,
             v_dtype: np.dtype, base_planes: tuple[PlaneSpec, ...],
             window_rows: int) -> SegmentSections:
        (slot_clock, slot_pos, slot_active, slot_salience, turn_starts, sampler_state,
         counters), at = plan_metadata(SEG_HEADER.size, n)
        k_rows = align_up(at, KV_ALIGN)
        v_rows = k_rows + n_layers * n_dirty * kv_dim * np.dtype(k_dtype).itemsize
        at = v_rows + n_layers * n_dirty * kv_dim * np.dtype(v_dtype).itemsize
        planes: dict[str, tuple[int, PlaneSpec]] = {}
        if base_planes:
            at = align_up(at, KV_ALIGN)
        for spec in base_planes:
            stored = segment_plane(spec, window_rows)
            planes[spec.name] = (at, stored)
            at += stored.nbytes
        return SegmentSections(slot_clock, slot_pos, slot_active, slot_salience, turn_starts,
                               sampler_state, counters, k_rows, v_rows, planes, at,
                               at + SEG_TRAILER.size)


def segment_plane(spec: PlaneSpec, window_rows: int) -> PlaneSpec:
    """What a segment stores of a base plane: a window plane's newest `window_rows` rows
    (layers, window_rows, kv_dim); a conv carry whole (it is a few rows per layer)."""
    if spec.name in WINDOW_PLANES:
        return PlaneSpec(spec.name, spec.dtype, (spec.shape[0], window_rows, *spec.shape[2:]))
    return spec


def window_rows_needed(window: int, prev_clock: int, dirty_from: int, clock: int) -> int:
    """Window rows a segment must carry. Rows of tokens stamped after dirty_from changed; so
    did every row when the state went back behind the state it extends (a rollback past
    it overwrote rows the base still holds in their older contents): then the whole plane."""
    if clock < prev_clock:
        return window
    return min(window, clock - dirty_from)
