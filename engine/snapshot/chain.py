"""Restoring a snapshot chain: the validated base, then the longest valid prefix of its
segments (chain_walk.py checks them first, on metadata alone), before any live state is
touched (docs/snapshot.md, "Chains").

Each surviving K/V row is copied once: its source (the base or one segment) is worked out
across the whole chain first, so 50 segments cost one pass over the ring.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from ..conversation import Conversation
from ..fileio import describe_os_error
from .chain_walk import ParsedSegment, _Walk, walk_chain
from .format import SnapshotCorruptError, array_at
from .identity import WINDOW_PLANES
from .restore import ParsedSnapshot, _close, check_compatible, copy_base_into, read_snapshot
from .segment import ChainHead, chain_dir


class LinkRefusedError(ValueError):
    """Every link of a valid chain was refused by the caller (restore's `refuse`): each
    holds a state the stream has since taken back. Nothing is wrong with the files."""


@dataclass
class ChainReport:
    clock: int
    n_active: int
    stream_id: str  # the anchor: the last stream event the restored state includes
    session: dict  # the base identity's session facts, updated by the last segment applied
    segments: int  # applied
    bytes: int  # base + applied segments
    stopped: str | None  # "000004.seg: checksum mismatch", or None: the whole chain
    head: ChainHead  # the restored link: the next save extends the chain from it
    validate_ms: float
    copy_ms: float
    ignored: list[str] = field(default_factory=list)  # segment files past the valid prefix
    # Valid segments after the restored link that the caller refused: they hold states the
    # stream took back. The caller drops them (segment.drop_segments_after) before it saves.
    passed_over: int = 0

    @property
    def restore_ms(self) -> float:
        return self.validate_ms + self.copy_ms


Refusal = Callable[[str], "str | None"]  # a link's stream anchor -> why not, or None


def restore(conv: Conversation, base: Path, known_ids: Collection[str] | None = None,
            refuse: Refusal | None = None, apply: bool = True) -> ChainReport:
    """Validate base + segments, then make the longest valid prefix the conversation's
    state; with `refuse`, the newest link of that prefix it does not refuse. Raises
    SnapshotError (conversation untouched) if the base is unusable, LinkRefusedError if
    every link is refused. With `known_ids`, every link's anchor must be one of them.
    apply=False: only say what a restore would do (a rewind's plan)."""
    t0 = time.perf_counter()
    snap = read_snapshot(Path(base))
    chain = None
    try:
        check_compatible(snap, conv)
        if known_ids is not None and snap.header.stream_id not in known_ids:
            raise SnapshotCorruptError(
                f"stream anchor {snap.header.stream_id or '(none)'} is not in the stream")
        chain = walk_chain(snap, conv.model.config.context_length, known_ids)
        k = len(chain.segments)
        while refuse is not None and (why := refuse(chain.anchors[k])) is not None:
            if k == 0:
                raise LinkRefusedError(why)
            k -= 1
        segments, end = chain.segments[:k], chain.ends[k]
        t1 = time.perf_counter()
        if apply:  # with segments, the base's K/V rows go straight to where the chain's
            copy_base_into(snap, conv, kv=not segments)  # end keeps them: copied once
            _apply(conv, snap, segments, end, chain.planes)
        t2 = time.perf_counter()
        session = dict(snap.identity.get("session", {}))
        last = segments[-1].header if segments else None
        if last is not None:
            session.update(skipped_tokens=last.skipped_tokens,
                           awaiting_reply=last.awaiting_reply)
        chain_bytes = sum(g.header.size for g in segments)
        passed_over = len(chain.segments) - k
        head = ChainHead(chain.base_digest, snap.size, chain.planes, end.seq, end.digest,
                         end.clock, chain.rebases, conv.arena.generation, chain_bytes,
                         chain.base_anchor)
        return ChainReport(end.clock, len(end.slot_clock), chain.anchors[k], session,
                           len(segments), snap.size + chain_bytes, chain.stopped, head,
                           (t1 - t0) * 1e3, (t2 - t1) * 1e3, chain.ignored, passed_over)
    finally:
        _close(snap.mapping)
        if chain is not None:
            chain.close()


def _apply(conv: Conversation, snap: ParsedSnapshot, segments: list[ParsedSegment],
           walk: _Walk, planes) -> None:
    """Copy the chain's end state into the arena: K/V rows from the base or the segment
    that holds each, then the last segment's metadata, then the planes segment by segment.
    The arena holds the base's metadata and planes already (copy_base_into, kv=False)."""
    if not segments:
        return
    v, last = conv.arena.views(), segments[-1]
    n = last.header.n_active
    # Base rows surviving to the end form a prefix, in clock order (eviction compacts toward
    # slot 0); each segment's survivors are one contiguous run of slots after them (a
    # segment's rows are stamped after everything it kept).
    from_base = int(np.count_nonzero(walk.source == -1))
    runs = [(None, 0, from_base, walk.row[:from_base])] if from_base else []
    for index, seg in enumerate(segments):
        dest = np.flatnonzero(walk.source == index)
        if dest.size:
            runs.append((seg, int(dest[0]), int(dest[-1]) + 1, walk.row[dest]))
    for layer in range(v.k_cache.shape[0]):
        for seg, start, end, rows in runs:
            for kind, target in (("k", v.k_cache), ("v", v.v_cache)):
                source = snap.slab(kind, layer) if seg is None else seg.rows(kind, layer)
                _gather(source, rows, target[layer, start:end])
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


def _gather(source: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
    """out[:] = source[rows], without a temporary where it can: a run of rows is a slice,
    and a gather into the same element type goes straight to `out` (f16 <-> f32 is
    converted by the copy)."""
    if rows.size and rows[-1] - rows[0] + 1 == rows.size:
        np.copyto(out, source[rows[0]:rows[-1] + 1])
    elif source.dtype == out.dtype:
        np.take(source, rows, axis=0, out=out, mode="clip")  # "raise" would buffer
    else:
        np.copyto(out, source[rows])


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
