"""Reading a complete snapshot (a chain's base) back: validate everything first, then copy
into the arena. chain.py's `restore` is the entry point: the base, then its segments.

The file is mapped read-only and checked in full (sizes, magic, version, checksum, identity,
ring invariants) before any live state is touched. Only then are its sections copied into the
aligned arena views; file bytes are never used in place.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash
from ulid import ULID

from ..conversation import Conversation
from ..errors import UnusableFileError
from ..fileio import describe_os_error, open_regular
from ..state.arena import (
    CLOCK,
    N_ACTIVE,
    N_ANCHORS,
    NEXT_POS,
    TOTAL_INGESTED,
)
from .format import (
    METADATA,
    Header,
    Sections,
    SnapshotChecksumError,
    SnapshotCorruptError,
    SnapshotError,
    SnapshotIdentityError,
    SnapshotTruncatedError,
    array_at,
    metadata_view,
    slab_rows,
    unpack_header,
    unpack_sections,
    unpack_trailer,
)
from .identity import (
    WINDOW_PLANES,
    identity_of,
    parse_identity,
    plane_specs,
    window_from_token_order,
)


class SnapshotUnreadableError(SnapshotError):
    """The snapshot path is not a readable regular file (a directory, a link, a FIFO...)."""


@dataclass
class ParsedSnapshot:
    path: Path
    size: int
    header: Header
    sections: Sections
    identity: dict
    mapping: mmap.mmap  # read-only; only ever copied from

    def arrays(self) -> dict[str, np.ndarray]:
        """The METADATA sections, named as the arena's views are (ring_counters)."""
        n = self.sections.n_active
        return {"ring_counters" if name == "counters" else name:
                metadata_view(self.mapping, self.sections, n, name) for name in METADATA}

    def slab(self, kind: str, layer: int) -> np.ndarray:
        """One layer's K ("k") or V ("v") slab, (n_active, kv_dim), read-only."""
        s = self.sections
        offset = s.k_slab(layer) if kind == "k" else s.v_slab(layer)
        dtype = s.k_dtype if kind == "k" else s.v_dtype
        flat = array_at(self.mapping, offset, dtype, s.n_active * s.kv_dim)
        return slab_rows(flat, s.n_active, s.kv_dim, kind == "v" and s.v_by_dimension)


def read_snapshot(path: Path) -> ParsedSnapshot:
    """Map and validate the file's own structure and checksum (no identity check yet)."""
    try:  # a directory, link, FIFO or unreadable file at the path is refused like bad bytes
        fd = open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        raise SnapshotUnreadableError(f"{path.name} does not exist") from None
    except UnusableFileError as exc:
        raise SnapshotUnreadableError(str(exc)) from None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            raise SnapshotTruncatedError("truncated at byte 0 (empty file)")
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        mapping = mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ)
    except OSError as exc:
        raise SnapshotUnreadableError(f"{path.name} cannot be read: "
                                      f"{describe_os_error(exc)}") from None
    finally:
        os.close(fd)
    try:
        header = unpack_header(mapping)
        sections = unpack_sections(mapping, header, size)
        stored = unpack_trailer(mapping, sections)
        with memoryview(mapping) as whole:
            actual = xxhash.xxh3_128_digest(whole[: sections.trailer])
        if actual != stored:
            raise SnapshotChecksumError("checksum mismatch")
        identity = parse_identity(mapping, sections)
    except BaseException:
        _close(mapping)
        raise
    return ParsedSnapshot(path, size, header, sections, identity, mapping)


def check_compatible(snap: ParsedSnapshot, conv: Conversation) -> None:
    """Refuse, with a reason, a snapshot this conversation cannot hold exactly."""
    mine, theirs, h = identity_of(conv), snap.identity, snap.header
    if theirs.get("model_fingerprint") != mine["model_fingerprint"]:
        raise SnapshotIdentityError(
            f"different model (snapshot: {theirs.get('model_name')!r} "
            f"{str(theirs.get('model_fingerprint'))[:12]}, loaded: {mine['model_name']!r} "
            f"{mine['model_fingerprint'][:12]})"
        )
    for key in ("geometry", "rope"):
        if theirs.get(key) != mine[key]:
            raise SnapshotIdentityError(f"different {key} (snapshot {theirs.get(key)})")
    if (h.max_slots, theirs.get("max_slots")) != (mine["max_slots"], mine["max_slots"]):
        raise SnapshotIdentityError(
            f"different ring size (snapshot {h.max_slots} slots, engine {mine['max_slots']})"
        )
    if theirs.get("layers") != mine.get("layers"):
        raise SnapshotIdentityError(
            f"different per-layer state (snapshot {_kinds(theirs)}, engine {_kinds(mine)})")
    geometry, ring_layers = mine["geometry"], conv.model.config.n_full
    if (h.num_layers, h.kv_dim) != (ring_layers, geometry["kv_dim"]):
        raise SnapshotIdentityError(
            f"different geometry (snapshot {h.num_layers} layers x {h.kv_dim}, engine "
            f"{ring_layers} x {geometry['kv_dim']})"
        )
    specs = plane_specs(theirs, snap.sections)
    expected = [(p["name"], tuple(p["shape"])) for p in mine.get("planes", [])]
    if [(spec.name, spec.shape) for spec in specs] != expected:
        raise SnapshotIdentityError(
            f"different layer planes (snapshot {[s.name for s in specs]}, engine "
            f"{[name for name, _ in expected]})")
    _check_invariants(snap, geometry["context_length"])


def _kinds(identity: dict) -> str:
    layers = identity.get("layers")
    if not layers:
        return "every layer in the ring"
    kinds = layers.get("kinds", [])
    return ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds)) + \
        (f", window {layers.get('window')}" if layers.get("window") else "")


def _check_invariants(snap: ParsedSnapshot, context_length: int) -> None:
    a, h, n = snap.arrays(), snap.header, snap.sections.n_active
    c = a["ring_counters"]
    expected = {N_ACTIVE: n, N_ANCHORS: h.num_anchors, CLOCK: h.clock,
                TOTAL_INGESTED: h.total_ingested}
    for index, value in expected.items():
        if int(c[index]) != value:
            raise SnapshotCorruptError(f"ring counter {index} is {int(c[index])}, header {value}")
    pos, clocks = a["slot_pos"].astype(np.int64), a["slot_clock"]
    if not (a["slot_active"] == 1).all():
        raise SnapshotCorruptError("an inactive slot among the active ones")
    if n and (pos.min() < 0 or (np.diff(pos) <= 0).any() or int(c[NEXT_POS]) <= pos[-1]):
        raise SnapshotCorruptError("slot positions are not strictly increasing")
    if int(c[NEXT_POS]) > context_length:
        raise SnapshotCorruptError(f"next position {int(c[NEXT_POS])} beyond {context_length}")
    if n and ((np.diff(clocks.astype(np.int64)) <= 0).any() or int(clocks[-1]) > h.clock):
        raise SnapshotCorruptError("slot clocks are not increasing up to the header clock")
    if not np.isfinite(a["slot_salience"]).all():
        raise SnapshotCorruptError("non-finite salience")
    if h.stream_id:
        try:
            ULID.from_str(h.stream_id)
        except ValueError:
            raise SnapshotCorruptError(f"stream anchor {h.stream_id!r} is not a ULID") from None


def copy_base_into(snap: ParsedSnapshot, conv: Conversation, kv: bool = True) -> None:
    """Make a validated snapshot the conversation's state (chain.py applies segments after;
    with kv=False it places the K/V rows itself)."""
    v = conv.arena.views()
    n = snap.sections.n_active
    for name, source in snap.arrays().items():
        target = getattr(v, name)
        np.copyto(target[: source.shape[0]], source)
        if name.startswith("slot_"):
            target[n:] = 0
    # Slabs in another element type than this backend keeps (f16 from ggml, f32 from numpy)
    # are converted by the copy: f16 to f32 exactly, f32 to f16 rounded to nearest; V slabs
    # in the other orientation are transposed by it (both are seen by slot).
    for layer in range(snap.sections.n_layers if kv else 0):
        np.copyto(v.k_cache[layer, :n], snap.slab("k", layer))
        np.copyto(v.v_cache[layer, :n], snap.slab("v", layer))
    offset = snap.sections.planes
    for spec in plane_specs(snap.identity, snap.sections):
        rows = array_at(snap.mapping, offset, spec.dtype, spec.nbytes // spec.dtype.itemsize)
        rows = rows.reshape(spec.shape)
        if spec.name in WINDOW_PLANES:
            window_from_token_order(rows, snap.header.clock, getattr(v, spec.name))
        else:
            np.copyto(getattr(v, spec.name), rows)
        offset += spec.nbytes
    views = conv.arena.invalidate()  # anything holding the old views must not use them now
    conv.sampler.load_state(views)
    conv.last_logits = None  # logits are scratch: the next pass recomputes them


def _close(mapping: mmap.mmap) -> None:
    # An exception's traceback may still hold a view; the mapping then closes when it goes.
    with contextlib.suppress(BufferError):
        mapping.close()
