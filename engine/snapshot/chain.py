"""Restoring a snapshot chain: the validated base, then the longest valid prefix of its
segments (chain_walk.py checks them first, on metadata alone), before any live state is
touched (docs/snapshot.md, "Chains").

Each surviving K/V row is copied once: its source (the base or one segment) is worked out
across the whole chain first, so 50 segments cost one pass over the ring.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from ..conversation import Conversation
from ..fileio import describe_os_error
from .chain_walk import ParsedSegment, _Walk, walk_chain
from .format import SnapshotCorruptError, array_at
from .identity import WINDOW_PLANES
from .restore import _close, check_compatible, copy_base_into, read_snapshot
from .segment import ChainHead, chain_dir


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


def restore(conv: Conversation, base: Path,
            known_ids: Collection[str] | None = None) -> ChainReport:
    """Validate base + segments, then make the longest valid prefix the conversation's
    state. Raises SnapshotError (conversation untouched) only if the base is unusable. With
    `known_ids`, every link's stream anchor must be one of them."""
    t0 = time.perf_counter()
    snap = read_snapshot(Path(base))
    chain = None
    try:
        check_compatible(snap, conv)
        if known_ids is not None and snap.header.stream_id not in known_ids:
            raise SnapshotCorruptError(
                f"stream anchor {snap.header.stream_id or '(none)'} is not in the stream")
        chain = walk_chain(snap, conv.model.config.context_length, known_ids)
        t1 = time.perf_counter()
        copy_base_into(snap, conv)
        _apply(conv, chain.segments, chain.end, chain.planes)
        t2 = time.perf_counter()
        session = dict(snap.identity.get("session", {}))
        last = chain.segments[-1].header if chain.segments else None
        if last is not None:
            session.update(skipped_tokens=last.skipped_tokens,
                           awaiting_reply=last.awaiting_reply)
        end = chain.end
        head = ChainHead(chain.base_digest, snap.size, chain.planes, end.seq, end.digest,
                         end.clock, chain.rebases, conv.arena.generation,
                         sum(g.header.size for g in chain.segments))
        return ChainReport(end.clock, len(end.slot_clock),
                           last.stream_id if last else snap.header.stream_id, session,
                           len(chain.segments), snap.size + head.chain_bytes, chain.stopped,
                           head, (t1 - t0) * 1e3, (t2 - t1) * 1e3, chain.ignored)
    finally:
        _close(snap.mapping)
        if chain is not None:
            chain.close()


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
