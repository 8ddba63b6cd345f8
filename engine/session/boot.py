"""Building a session's working state from its snapshot and stream: warm, else cold.

Warm: the snapshot validates and the stream agrees with it, so the state is restored and only
the events after the snapshot's anchor are replayed. Cold: the system prompt is prefilled as
anchors and the stream replayed (at most a ring's worth, replay.py). Every unusable snapshot
(bad bytes, a directory, a link, a FIFO) is set aside, never deleted; a stream whose ids make
the anchor ambiguous refuses the warm boot. Either way the report says why it went cold.

These functions work on a Session's parts (session.py), fresh or already in use.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from ..snapshot.chain import set_aside
from ..snapshot.format import SnapshotError
from ..snapshot.segment import drop_segments_after
from .links import StreamOrderError, first_index, newest_link, split_at_anchor
from .replay import ReplayProgress, replay, ring_order, taken_in, withdrawn_ids
from .stream import StreamEvent, StreamRead

if TYPE_CHECKING:
    from .session import Session


@dataclass
class BootReport:
    kind: str  # "cold" or "warm"
    reason: str
    restore_ms: float = 0.0
    replay_ms: float = 0.0
    replayed_events: int = 0
    replayed_tokens: int = 0
    skipped_tokens: int = 0  # left out of the replay at the front: the ring cannot hold them
    restored_slots: int = 0
    snapshot_bytes: int = 0  # base and segments
    snapshot_segments: int = 0  # segments applied after the base
    phases_ms: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def load(session: Session, read: StreamRead, cold_reason: str | None,
         progress: ReplayProgress | None) -> BootReport:
    """Warm from the snapshot if it can be used, else cold (with `cold_reason` if given)."""
    reason = cold_reason
    if reason is None and not os.path.lexists(session.snapshots.path):
        reason = "no snapshot"
    if reason is None:
        try:
            return warm(session, read, progress)
        except SnapshotError as exc:
            reason = f"snapshot refused: {exc}; {_set_aside(session)}"
        except StreamOrderError as exc:
            reason = f"warm boot refused: {exc}"
    return cold(session, read.events, reason, progress)


def cold(session: Session, events: list[StreamEvent], reason: str,
         progress: ReplayProgress | None) -> BootReport:
    conv = session.conversation
    if conv.ring.total_ingested:  # not a fresh conversation: start over
        conv.reset()
    session.transcript.clear()
    session.snapshots.last_clock = None
    kept = taken_in(events, withdrawn_ids(events))
    t0 = time.perf_counter()
    replayed, skipped = replay(conv, session.transcript, kept, progress, first_is_system=True)
    replay_ms = (time.perf_counter() - t0) * 1e3
    # The anchor: the last event in ring order (a reply moves up to the message it answers,
    # so not always the file's last line), withdrawn or not.
    session.last_event_id = ring_order(events)[-1].id if events else None
    session.skipped_tokens = skipped
    session.unusable = None
    return BootReport(kind="cold", reason=reason, replay_ms=replay_ms,
                      replayed_events=len(kept), replayed_tokens=replayed,
                      skipped_tokens=skipped, phases_ms={"replay": replay_ms})


def warm(session: Session, read: StreamRead, progress: ReplayProgress | None) -> BootReport:
    """Restore the newest saved state the stream agrees with (links.py), then replay the
    events after its anchor. SnapshotError and StreamOrderError leave the state untouched."""
    events = read.events
    snapshots = session.snapshots
    choice = newest_link(session, read)
    report = choice.report
    if choice.archived:  # the live chain holds only what the stream took back
        snapshots.head = None  # the next save is a complete one
    elif report.passed_over and session.owner is None:
        # Links holding what the stream took back, in files this boot does not own (the
        # boot comparison beside the engine that does): left alone; a save would be complete.
        snapshots.head = None
    else:
        if report.passed_over:  # the chain goes on from the restored link
            drop_segments_after(snapshots.chain_dir, report.head.seq)
        snapshots.head = report.head
    warnings = []
    if report.stopped:
        warnings.append(f"snapshot chain stopped at {report.stopped}; the stream replays "
                        f"the rest; {set_aside(choice.base, report.ignored)}")
    held, after = split_at_anchor(read, first_index(events)[report.stream_id])
    withdrawn = withdrawn_ids(events)
    snapshots.last_clock = report.clock
    session.transcript.reset_to(taken_in(held, withdrawn),
                                bool(report.session.get("awaiting_reply", False)))
    later = taken_in(after, withdrawn)
    t0 = time.perf_counter()
    replayed, skipped = replay(session.conversation, session.transcript, later, progress,
                               first_is_system=False)
    replay_ms = (time.perf_counter() - t0) * 1e3
    session.last_event_id = (after or held)[-1].id  # the last in ring order
    earlier = report.session.get("skipped_tokens", 0)  # 0 in snapshots older than the field
    session.skipped_tokens = skipped + (earlier if isinstance(earlier, int) and earlier > 0
                                        else 0)
    session.unusable = None
    return BootReport(
        kind="warm", reason="snapshot valid", restore_ms=report.restore_ms,
        replay_ms=replay_ms, replayed_events=len(later), replayed_tokens=replayed,
        skipped_tokens=skipped, restored_slots=report.n_active, snapshot_bytes=report.bytes,
        phases_ms={"validate": report.validate_ms, "copy": report.copy_ms, "replay": replay_ms},
        warnings=warnings, snapshot_segments=report.segments,
    )


def _set_aside(session: Session) -> str:
    path = session.snapshots.path
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    aside = path.with_name(f"{path.name}.rejected-{stamp}")
    try:
        path.rename(aside)
    except OSError as exc:
        return f"could not be set aside ({exc.strerror})"
    return f"kept as {aside.name}"
