"""One conversation's snapshot on disk: when a save is a segment and when a complete one.

A save records only what changed since the last durable link of the chain (segment.py,
docs/snapshot.md "Chains"), unless a segment cannot: no base yet, the arena was reset or
restored, the ring rebased, or the chain grew past `compact_share` of its base. Then it
writes a complete snapshot (writer.py) over the base, and the old base and its segments
become an earlier generation (archive.py), kept for warm rewinds within a budget.

Either way the cut is taken in the engine thread (small arrays copied, the ring frozen so
that no eviction, rebase or rollback moves a captured row) and written on a background
thread; decoding continues meanwhile. chain.py reads base and segments back.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path

from ..conversation import Conversation
from ..errors import UnusableFileError
from ..fileio import describe_os_error
from ..state.arena import REBASES
from .archive import KEEP_BYTES, KEEP_LINKS, archive_generation, move_segments, prune
from .identity import plane_specs
from .segment import (
    COMPACT_SHARE,
    ChainHead,
    SegmentCut,
    chain_dir,
    compaction_reason,
    remove_segments,
    take_segment_cut,
    write_segment,
)
from .writer import Cut, Progress, take_cut, tmp_path_for, write_cut

WRITER_NICENESS = 10
FULL, SEGMENT = "full", "segment"  # SaveResult.kind


class SnapshotStatus(IntEnum):
    SAVED = 0
    FAILED = 1
    EXISTS = 2  # the zero-delta gate: the clock has not moved since the last checkpoint
    BUSY = 3  # another save of this conversation is still being written


@dataclass(frozen=True)
class SaveResult:
    status: SnapshotStatus
    path: Path
    clock: int
    bytes: int = 0  # written by this save: the whole snapshot, or one segment
    ms: float = 0.0
    error: str | None = None
    kind: str = FULL  # FULL or SEGMENT (what was, or is being, written)
    why_full: str | None = None  # for a FULL save, why a segment could not record it


@dataclass(frozen=True)
class ChainSettings:
    """How a session's snapshot chain grows and what it keeps (the engine's --keep-turns
    and --compact-share)."""

    keep_links: int = KEEP_LINKS
    compact_share: float = COMPACT_SHARE

    def apply(self, snapshots: Snapshotter) -> None:
        snapshots.keep_links = self.keep_links
        snapshots.compact_share = self.compact_share


def _yield_cpu_to_decoding() -> None:
    """Lower this thread's CPU priority: on a busy machine the decode loop's BLAS threads go
    first and the writer fills the gaps. On Linux a nice value is per thread."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WRITER_NICENESS)


@dataclass
class Snapshotter:
    """Owns one conversation's snapshot (`path`, the base, and its chain directory) and
    saves to it, synchronously or on a background thread."""

    conversation: Conversation
    path: Path
    last_clock: int | None = None  # clock of the state known to be on disk
    progress: Progress | None = None  # of a complete save's bytes
    # The chain's last durable link: set by a save or a chain restore (boot.py), None when
    # the next save must be complete. incremental=False makes every save complete.
    head: ChainHead | None = None
    incremental: bool = True
    compact_share: float = COMPACT_SHARE
    # Earlier generations kept for warm rewinds (archive.py): about one link a turn.
    keep_links: int = KEEP_LINKS
    keep_bytes: int = KEEP_BYTES
    prune_problem: str | None = None  # the last complete save's, if pruning failed
    _thread: threading.Thread | None = field(default=None, repr=False)
    _result: SaveResult | None = field(default=None, repr=False)

    @property
    def chain_dir(self) -> Path:
        return chain_dir(self.path)

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def disk_bytes(self) -> int:
        """What the saved state takes on disk: the base and its segments."""
        try:
            size = self.path.stat().st_size
        except OSError:
            return 0
        return size + (self.head.chain_bytes if self.head is not None else 0)

    def remove_stale_tmp(self) -> str | None:
        """Delete the temporary files an interrupted save left (a base's is as large as a
        snapshot, and otherwise kept until the next save); say what was done, or None."""
        if self.busy:
            return None
        stale = [tmp_path_for(self.path)]
        with contextlib.suppress(OSError):
            stale += [Path(e.path) for e in os.scandir(self.chain_dir)
                      if e.name.endswith(".seg.tmp")]
        removed, total = [], 0
        for tmp in stale:
            try:
                size = tmp.lstat().st_size
                tmp.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                return f"{tmp.name}, left by an interrupted save, cannot be removed: " \
                       f"{describe_os_error(exc)}"
            removed.append(tmp.name)
            total += size
        if not removed:
            return None
        return f"removed {', '.join(removed)} ({total} bytes), left by an interrupted save"

    def wait(self) -> SaveResult | None:
        """Block until an in-flight save ends; its result (None if there was none)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return self._result

    def next_save_kind(self) -> tuple[str, str | None]:
        """What the next save would write, and for FULL why."""
        if not self.incremental:
            why: str | None = "incremental saves are off"
        elif self.head is not None and not self.path.exists():
            why = "the base snapshot is gone"  # moved aside or deleted behind our back
        else:
            why = compaction_reason(self.head, self.conversation, self.compact_share)
        return (FULL, why) if why is not None else (SEGMENT, None)

    def save(self, stream_id: str, session: dict | None = None, *, wait: bool = True,
             on_done: Callable[[SaveResult], None] | None = None) -> SaveResult:
        """Checkpoint now. With wait=False the write runs on a background thread and the
        returned result has status SAVED only as 'started'; on_done gets the final one."""
        conv, ring = self.conversation, self.conversation.ring
        if self.busy:
            return SaveResult(SnapshotStatus.BUSY, self.path, ring.clock)
        self._thread = None
        if self.last_clock == ring.clock and ring.rewound_to is None and self.path.exists():
            result = SaveResult(SnapshotStatus.EXISTS, self.path, ring.clock)
            if on_done is not None:
                on_done(result)
            return result
        kind, why = self.next_save_kind()
        if kind == SEGMENT:
            cut: Cut | SegmentCut = take_segment_cut(conv, self.head, stream_id, session)
            work = self._write_segment
        else:
            cut = take_cut(conv, stream_id, session)
            work = self._write_full
        generation, rewound = conv.arena.generation, ring.rewound_to
        ring.freeze()
        self._result = None
        thread = threading.Thread(target=self._run, args=(work, cut, generation, rewound, why,
                                                          on_done),
                                  name=f"snapshot-{self.path.name}", daemon=True)
        self._thread = thread
        thread.start()
        if wait:
            return self.wait()  # type: ignore[return-value]
        return SaveResult(SnapshotStatus.SAVED, self.path, cut.clock, kind=kind, why_full=why)

    def _write_full(self, cut: Cut, generation: int) -> int:
        old = self.head if self.keep_links > 1 and self.path.exists() else None
        archived = archive_generation(self.path, old.base_anchor, old.base_digest) \
            if old is not None else None
        size, digest = write_cut(cut, self.path, self.progress)
        # Durable: from here on the base is this file, whatever happens to the old segments.
        self.head = ChainHead(digest, size, plane_specs(cut.identity, cut.sections), 0, digest,
                              cut.clock, int(cut.counters[REBASES]), generation,
                              base_anchor=cut.header.stream_id)
        # They name the old base, so the new chain would never apply them: they go beside
        # their archived base, or away. A failure costs disk space only (the next complete
        # save tries again) or, for an archive, the earlier turns' warm rewinds.
        with contextlib.suppress(OSError):
            if archived is not None:
                move_segments(self.path, archived)
            remove_segments(self.chain_dir)
        self.prune_problem = prune(self.path, 1, self.keep_links, self.keep_bytes)
        return size

    def _write_segment(self, cut: SegmentCut, generation: int) -> int:
        head = self.head
        assert head is not None
        self.head = write_segment(cut, head, self.chain_dir)
        return cut.sections.size

    def _run(self, work, cut, generation: int, rewound: int | None, why: str | None,
             on_done) -> None:
        _yield_cpu_to_decoding()
        t0 = time.perf_counter()
        kind, clock = FULL if why is not None else SEGMENT, cut.clock
        ring = self.conversation.ring
        try:
            size = work(cut, generation)
            # Durable: rows rewritten after a rollback before the cut need no carrying now.
            # (The ring is frozen, so no rollback can have moved the mark meanwhile.)
            if ring.rewound_to == rewound:
                ring.rewound_to = None
            result = SaveResult(SnapshotStatus.SAVED, self.path, clock, size,
                                (time.perf_counter() - t0) * 1e3, kind=kind, why_full=why)
            self.last_clock = clock
        except OSError as exc:
            result = SaveResult(SnapshotStatus.FAILED, self.path, clock,
                                error=describe_os_error(exc), kind=kind, why_full=why)
        except UnusableFileError as exc:
            result = SaveResult(SnapshotStatus.FAILED, self.path, clock, error=str(exc),
                                kind=kind, why_full=why)
        except Exception as exc:  # a bug must still thaw the ring and reach the caller
            result = SaveResult(SnapshotStatus.FAILED, self.path, clock,
                                error=f"{type(exc).__name__}: {exc}", kind=kind, why_full=why)
        finally:
            ring.thaw()
        self._result = result
        if on_done is not None:
            on_done(result)
