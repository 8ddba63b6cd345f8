"""The snapshot file format: layout, packing and validation (no I/O policy here).

Byte layout, all little-endian (docs/snapshot.md has the full table):

    0     SnapshotHeader     624 B  the seed's extern struct, byte for byte
    624   BodyHeader          64 B  b"CHANNEL1", n_active, identity length, section offsets,
                                    K and V element codes (version 2)
    688   identity               -  UTF-8 JSON: model fingerprint, dtypes, geometry, RoPE, policy
    ...   slot metadata          -  clock u64[n], pos i32[n], active u8[n], salience f32[n]
    ...   ring state             -  turn_starts u64[128], sampler_state u64[6], counters u64[8]
    kv    K slabs, V slabs       -  [L][n][kv_dim] each in their element type, 64-byte aligned;
                                    L counts the ring's (FULL) layers; version 4 V slabs may
                                    be [L][kv_dim][n] instead (flagged in their code)
    ...   layer planes           -  version 3: the state of layers outside the ring, whole
                                    (window planes in token order, conv carries), 64-aligned
    end-24  trailer           24 B  b"SNAPSUM\\0" + xxh3-128 of every byte before the trailer

Version 2 added the element codes: a backend may keep keys in f16 (ggml). Version 1 files,
whose slabs are all f32 and whose code bytes are zero padding, are still read. Version 3
added the layer planes of hybrid models (their offset and size in the body header, their
names, types and shapes in the identity); a model without such layers writes none, and its
version 3 file differs from a version 2 one only in the version number. Version 4 lets
the V slabs be stored by dimension, as a backend that keeps its values so (ggml) holds them
(engine/state/kv_format.py), flagged by BY_DIMENSION in the V element code: a restore into
the same orientation is then one contiguous copy per row, and any other is transposed by it.

Every failure to read a file raises a SnapshotError subclass whose message is one line.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from ..align import align_up
from ..errors import ChannelError
from ..state.arena import MAX_TURN_BOUNDARIES, SAMPLER_WORDS

SNAPSHOT_MAGIC = b"SNAP"
SNAPSHOT_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
# Element codes of the K and V slabs in the body header; version 1 slabs are f32.
KV_DTYPES = {1: np.dtype(np.float32), 2: np.dtype(np.float16)}
# Or'ed into a V element code (version 4, and chain segments): each layer's slab is stored
# [kv_dim][n], one row of n values per dimension, rather than [n][kv_dim].
BY_DIMENSION = 0x80
MAX_STREAM_ID = 64
# The seed's SnapshotHeader: extern struct, natural C alignment, which '<' reproduces here
# because every field already sits at a multiple of its size.
HEADER = struct.Struct(f"<4sIQIIIIQHH{MAX_STREAM_ID}sI{MAX_TURN_BOUNDARIES}I")
BODY_MAGIC = b"CHANNEL1"
# magic, n_active, identity_len, kv_offset, kv_bytes, size, K code, V code (version 2; else 0),
# planes offset, planes bytes (version 3; else 0)
BODY = struct.Struct("<8sIIQQQBBQQ6x")
TRAILER_MAGIC = b"SNAPSUM\0"
TRAILER = struct.Struct("<8s16s")
COUNTER_WORDS = 8
KV_ALIGN = 64
# The per-slot metadata and ring state a snapshot, and every chain segment, keep whole, in
# file order (Cut, SegmentCut and both Sections name them alike).
METADATA = ("slot_clock", "slot_pos", "slot_active", "slot_salience", "turn_starts",
            "sampler_state", "counters")


def plan_metadata(at: int, n: int) -> tuple[tuple[int, ...], int]:
    """Offsets of the METADATA sections for `n` live slots from byte `at`, and their end:
    clock u64[n], pos i32[n], active u8[n] (to 4), salience f32[n] (to 8), turn starts
    u64[128], sampler state u64[6], counters u64[8]."""
    slot_clock, at = at, at + 8 * n
    slot_pos, at = at, at + 4 * n
    slot_active, at = at, align_up(at + n, 4)
    slot_salience, at = at, align_up(at + 4 * n, 8)
    turn_starts, at = at, at + 8 * MAX_TURN_BOUNDARIES
    sampler_state, at = at, at + 8 * SAMPLER_WORDS
    counters, at = at, at + 8 * COUNTER_WORDS
    return (slot_clock, slot_pos, slot_active, slot_salience, turn_starts, sampler_state,
            counters), at
F32 = np.dtype(np.float32)

assert HEADER.size == 624 and BODY.size == 64


class SnapshotError(ChannelError):
    """A snapshot cannot be used; the message says why in one line."""


class SnapshotTruncatedError(SnapshotError):
    pass


class SnapshotMagicError(SnapshotError):
    pass


class SnapshotVersionError(SnapshotError):
    pass


class SnapshotChecksumError(SnapshotError):
    pass


class SnapshotIdentityError(SnapshotError):
    """Taken with another model, geometry or dtype: refused, never misread."""


class SnapshotCorruptError(SnapshotError):
    """Fields contradict each other or the ring's invariants."""


@dataclass(frozen=True)
class Sections:
    """Absolute offsets of every section for a snapshot of n active slots."""

    n_active: int
    n_layers: int
    kv_dim: int
    identity: int
    identity_len: int
    slot_clock: int
    slot_pos: int
    slot_active: int
    slot_salience: int
    turn_starts: int
    sampler_state: int
    counters: int
    kv: int  # K slabs start here, V slabs follow
    k_dtype: np.dtype
    v_dtype: np.dtype
    planes: int  # the layer planes start here (version 3; == trailer when there are none)
    planes_bytes: int
    trailer: int
    size: int
    v_by_dimension: bool = False  # V slabs stored [kv_dim][n] (version 4)

    @staticmethod
    def plan(n_active: int, n_layers: int, kv_dim: int, identity_len: int,
             k_dtype: np.dtype = F32, v_dtype: np.dtype = F32,
             planes_bytes: int = 0, v_by_dimension: bool = False) -> Sections:
        at = HEADER.size + BODY.size
        identity = at
        at = align_up(at + identity_len, 8)
        (slot_clock, slot_pos, slot_active, slot_salience, turn_starts, sampler_state,
         counters), at = plan_metadata(at, n_active)
        kv = align_up(at, KV_ALIGN)
        k_dtype, v_dtype = np.dtype(k_dtype), np.dtype(v_dtype)
        kv_end = kv + n_layers * n_active * kv_dim * (k_dtype.itemsize + v_dtype.itemsize)
        planes = align_up(kv_end, KV_ALIGN) if planes_bytes else kv_end
        trailer = planes + planes_bytes
        return Sections(n_active, n_layers, kv_dim, identity, identity_len, slot_clock,
                        slot_pos, slot_active, slot_salience, turn_starts, sampler_state,
                        counters, kv, k_dtype, v_dtype, planes, planes_bytes, trailer,
                        trailer + TRAILER.size, v_by_dimension)

    def slab_bytes(self, kind: str) -> int:
        """One layer's K ("k") or V ("v") bytes."""
        dtype = self.k_dtype if kind == "k" else self.v_dtype
        return self.n_active * self.kv_dim * dtype.itemsize

    @property
    def kv_bytes(self) -> int:
        return self.n_layers * (self.slab_bytes("k") + self.slab_bytes("v"))

    def k_slab(self, layer: int) -> int:
        return self.kv + layer * self.slab_bytes("k")

    def v_slab(self, layer: int) -> int:
        return self.kv + self.n_layers * self.slab_bytes("k") + layer * self.slab_bytes("v")


@dataclass(frozen=True)
class Header:
    """The seed header's fields, decoded."""

    version: int
    clock: int
    num_anchors: int
    num_layers: int
    kv_dim: int
    max_slots: int
    total_ingested: int
    stream_id: str
    turn_boundaries: tuple[int, ...]

    def pack(self) -> bytes:
        sid = self.stream_id.encode("ascii")
        if len(sid) > MAX_STREAM_ID:
            raise ValueError(f"stream id longer than {MAX_STREAM_ID} bytes")
        turns = list(self.turn_boundaries[-MAX_TURN_BOUNDARIES:])
        padded = turns + [0] * (MAX_TURN_BOUNDARIES - len(turns))
        return HEADER.pack(SNAPSHOT_MAGIC, self.version, self.clock, self.num_anchors,
                           self.num_layers, self.kv_dim, self.max_slots, self.total_ingested,
                           len(sid), 0, sid, len(turns), *(t & 0xFFFFFFFF for t in padded))


def unpack_header(data: bytes | memoryview) -> Header:
    """Decode and sanity-check the 624-byte seed header."""
    if len(data) < HEADER.size:
        raise SnapshotTruncatedError(f"truncated at byte {len(data)} (header needs {HEADER.size})")
    fields = HEADER.unpack_from(data, 0)
    magic, version = fields[0], fields[1]
    if magic != SNAPSHOT_MAGIC:
        raise SnapshotMagicError(f"not a snapshot (magic {bytes(magic)!r}, expected b'SNAP')")
    if version not in READABLE_VERSIONS:
        raise SnapshotVersionError(
            f"version {version} unsupported (this build reads {READABLE_VERSIONS[0]} to "
            f"{READABLE_VERSIONS[-1]})")
    (clock, anchors, layers, kv_dim, max_slots, ingested, sid_len, pad, sid, turn_count) = (
        fields[2:12]
    )
    if sid_len > MAX_STREAM_ID or pad != 0 or turn_count > MAX_TURN_BOUNDARIES:
        raise SnapshotCorruptError(
            f"header fields out of range (stream_id_len {sid_len}, pad {pad}, "
            f"turn_boundary_count {turn_count})"
        )
    try:
        stream_id = bytes(sid[:sid_len]).decode("ascii")
    except UnicodeDecodeError:
        raise SnapshotCorruptError("header stream_id is not ASCII") from None
    turns = tuple(fields[12 : 12 + turn_count])
    return Header(version, clock, anchors, layers, kv_dim, max_slots, ingested, stream_id, turns)


def dtype_code(dtype: np.dtype, by_dimension: bool = False) -> int:
    """The element code of slabs of `dtype` (V slabs stored by dimension are flagged)."""
    for code, known in KV_DTYPES.items():
        if known == dtype:
            return code | (BY_DIMENSION if by_dimension else 0)
    raise ValueError(f"no snapshot element code for {dtype}")


def parse_code(code: int) -> tuple[np.dtype, bool] | None:
    """(element type, stored by dimension) of a slab element code; None if unknown."""
    dtype = KV_DTYPES.get(code & ~BY_DIMENSION)
    return None if dtype is None else (dtype, bool(code & BY_DIMENSION))


def slab_rows(flat: np.ndarray, n: int, kv_dim: int, by_dimension: bool) -> np.ndarray:
    """A layer's stored slab of n slots, seen by slot: (n, kv_dim), a transposed view where
    it is stored by dimension (np.copyto into an arena plane stored alike stays contiguous)."""
    return flat.reshape(kv_dim, n).T if by_dimension else flat.reshape(n, kv_dim)


def pack_body(sections: Sections) -> bytes:
    return BODY.pack(BODY_MAGIC, sections.n_active, sections.identity_len, sections.kv,
                     sections.kv_bytes, sections.size, dtype_code(sections.k_dtype),
                     dtype_code(sections.v_dtype, sections.v_by_dimension),
                     sections.planes if sections.planes_bytes else 0, sections.planes_bytes)


def unpack_sections(data: bytes | memoryview, header: Header, actual_size: int) -> Sections:
    """Decode the body header and check every section lies inside a file of this size."""
    end = HEADER.size + BODY.size
    if actual_size < end:
        raise SnapshotTruncatedError(f"truncated at byte {actual_size} (body header needs {end})")
    (magic, n_active, identity_len, kv, kv_bytes, size, k_code, v_code, planes,
     planes_bytes) = BODY.unpack_from(data, HEADER.size)
    if magic != BODY_MAGIC:
        raise SnapshotMagicError(f"unknown snapshot body {bytes(magic)!r}")
    if actual_size < size:
        raise SnapshotTruncatedError(f"truncated at byte {actual_size} of {size}")
    if actual_size > size:
        raise SnapshotCorruptError(f"{actual_size - size} unexpected bytes after the trailer")
    if n_active > header.max_slots or header.num_anchors > n_active:
        raise SnapshotCorruptError(
            f"{n_active} active slots, {header.num_anchors} anchors, ring of {header.max_slots}"
        )
    if header.version == 1:
        k_code = v_code = 1  # version 1 padded these bytes with zeros; its slabs are f32
    values = parse_code(v_code)
    if k_code not in KV_DTYPES or values is None or (values[1] and header.version < 4):
        raise SnapshotCorruptError(f"unknown K/V element codes {k_code}/{v_code}")
    if header.version < 3 and (planes or planes_bytes):
        raise SnapshotCorruptError(f"version {header.version} with layer planes")
    sections = Sections.plan(n_active, header.num_layers, header.kv_dim, identity_len,
                             KV_DTYPES[k_code], values[0], planes_bytes, values[1])
    if (sections.kv, sections.size, sections.kv_bytes) != (kv, size, kv_bytes) or \
            (planes_bytes and sections.planes != planes):
        raise SnapshotCorruptError("section offsets disagree with the header's geometry")
    return sections


def pack_trailer(digest: bytes) -> bytes:
    return TRAILER.pack(TRAILER_MAGIC, digest)


def unpack_trailer(data: bytes | memoryview, sections: Sections) -> bytes:
    magic, digest = TRAILER.unpack_from(data, sections.trailer)
    if magic != TRAILER_MAGIC:
        raise SnapshotChecksumError("checksum trailer missing")
    return digest


def array_at(data, offset: int, dtype, count: int) -> np.ndarray:
    """A read-only view of `count` items at `offset` (never written through; copied out)."""
    return np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<"), count=count, offset=offset)


METADATA_TYPES = {"slot_clock": np.uint64, "slot_pos": np.int32, "slot_active": np.uint8,
                  "slot_salience": np.float32, "turn_starts": np.uint64,
                  "sampler_state": np.uint64, "counters": np.uint64}


def metadata_view(data, sections, n: int, name: str) -> np.ndarray:
    """One METADATA section of a mapped snapshot or segment with `n` live slots, read-only."""
    count = {"turn_starts": MAX_TURN_BOUNDARIES, "sampler_state": SAMPLER_WORDS,
             "counters": COUNTER_WORDS}.get(name, n)
    return array_at(data, getattr(sections, name), METADATA_TYPES[name], count)
