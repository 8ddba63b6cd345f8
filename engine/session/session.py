"""A named session: its stream log, transcript, conversation state and snapshot, in step.

A session has one writer: `open` takes its lock (owner.py) before booting it, and `close`
gives the lock back; a second opener is refused. `boot` alone takes no lock, for programs
that only read a session (the boot comparison, benchmarks, tests).

Boot is warm when `NAME.snapshot.bin` validates and the stream agrees with it, else cold,
with the reason (boot.py).

Answering a message (logging it, prefilling, decoding, logging the reply) is answering.py's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from ..backends.base import Backend
from ..conversation import Conversation
from ..errors import ModelFileChangedError, StreamError
from ..model.model import Model
from ..paths import SessionFiles, check_session_name
from ..snapshot.snapshotter import SaveResult, Snapshotter
from ..state.ring_policy import RingPolicy
from . import boot as booting
from .answering import Answering
from .boot import BootReport, StreamOrderError
from .owner import SessionLock, acquire_session
from .replay import ReplayProgress
from .stream import StreamEvent, StreamLog, StreamRead, id_order
from .transcript import Transcript
from .turns import LastTurn

log = logging.getLogger("channel.engine")


class Session(Answering):
    def __init__(self, model: Model, data_dir: Path, name: str,
                 policy: RingPolicy | None = None, backend: Backend | None = None):
        self.model = model
        self.name = check_session_name(name)
        self.data_dir = Path(data_dir)
        self.stream = StreamLog(SessionFiles(self.data_dir, name).stream)
        self.conversation = Conversation(model, policy, backend=backend)
        self.transcript = Transcript(model.template, model.tokenizer, model.fingerprint,
                                     model.config.vocab_size)
        self.snapshots = Snapshotter(self.conversation, SessionFiles(self.data_dir, name).snapshot)
        self.last_event_id: str | None = None
        self.unusable: str | None = None  # why the state cannot be trusted (reopen it)
        self.stream_offset = 0  # bytes of the stream that boot consumed
        self.last_turn: LastTurn | None = None  # what an undo can roll back to
        # Tokens of the stream this state never took in: a replay capped at a ring's worth
        # leaves the oldest out (replay.py), so the clock counts that many fewer. Saved with
        # the snapshot, so that a warm state can still be checked against a cold replay.
        self.skipped_tokens = 0
        self.stop_ids = model.tokenizer.end_of_generation_ids  # llama.cpp's EOG set
        self.owner: SessionLock | None = None  # held from `open` to `close`
        # Warnings for the front end that no request asked for (a model file replaced on
        # disk); taken by whoever reports them.
        self.notes: list[str] = []

    # -- ownership --------------------------------------------------------------------------
    def open(self, cold: bool = False, progress: ReplayProgress | None = None,
             owner: SessionLock | None = None, system: str | None = None) -> BootReport:
        """Take the session's lock (or hold `owner`, taken before, say, a model loads),
        then boot; the lock is held until `close`. Raises SessionBusyError, changing
        nothing, when another Channel has the session open."""
        if self.owner is None:
            self.owner = owner or acquire_session(self.data_dir, self.name)
        try:
            return self.boot(cold, progress, system)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Give the session's lock back, once any snapshot being written has landed (the
        next owner must not boot from a file this one is still replacing)."""
        if self.owner is None:
            return
        try:
            self.snapshots.wait()
        finally:
            self.owner.release()
            self.owner = None

    # -- boot and restore -------------------------------------------------------------------
    def boot(self, cold: bool = False, progress: ReplayProgress | None = None,
             system: str | None = None) -> BootReport:
        """Warm boot from the snapshot if it validates, else cold boot from the stream.
        A new session starts with the system prompt `system` (None or blank: the
        template's own, if it has one); an existing one keeps the prompt it has (pinned
        in the ring: a fork changes it, fork.py)."""
        t0 = time.perf_counter()
        self.last_turn = None
        warnings = [w for w in [self.snapshots.remove_stale_tmp()] if w]
        read = self.stream.read()
        self.stream_offset = read.end_offset
        if not read.events:
            if system is not None and system.strip():
                self.model.template.check_system_prompt(system)
            else:
                system = self.model.template.default_system_prompt()
            if system is not None:
                read = StreamRead([self.stream.append("system", system)], read.warnings,
                                  read.end_offset)
        read_ms = (time.perf_counter() - t0) * 1e3
        report = booting.load(self, read, "--cold: snapshot ignored" if cold else None, progress)
        report.phases_ms = {"read_stream": read_ms, **report.phases_ms}
        report.warnings = warnings + list(read.warnings) + report.warnings
        return report

    def restore_now(self, progress: ReplayProgress | None = None) -> BootReport:
        """Reload the last snapshot (waiting for any save in flight), then replay past it.
        A snapshot that cannot be used raises SnapshotError and changes nothing."""
        self.snapshots.wait()
        self.last_turn = None
        read = self.stream.read()
        try:
            return booting.warm(self, read, progress)
        except StreamOrderError as exc:
            return booting.cold(self, read.events, f"warm boot refused: {exc}", progress)

    def rebuild(self) -> BootReport:
        """Rebuild the working state from the snapshot and the stream (cold if it must)."""
        self.last_turn = None
        read = self.stream.read()
        self.stream_offset = read.end_offset
        return booting.load(self, read, None, None)

    @property
    def system_prompt(self) -> str | None:
        """The system prompt the conversation runs under (pinned in the ring), or None."""
        messages = self.transcript.messages
        return messages[0]["content"] if messages and messages[0]["role"] == "system" else None

    def keeps_its_system_prompt(self, asked: str | None) -> bool:
        """A system prompt was asked for that this session was not started with: it keeps
        its own (a new one goes to a new session or a fork), and the asker should hear so."""
        return bool(asked and asked.strip()) and asked != self.system_prompt

    def behind_anchor(self, event: StreamEvent) -> bool:
        """`event` comes before the last event the state includes: another program's line
        this process takes in only now. Fed now, the ring would hold it after lines the
        stream has after it (replay.py's ring order); a rebuild feeds it in its place."""
        return self.last_event_id is not None and id_order(event.id) < id_order(
            self.last_event_id)

    def ingest_event(self, event: StreamEvent) -> int:
        """Feed a non-user event another program appended (no reply); tokens fed."""
        self.last_turn = None
        tokens = self.transcript.event_tokens(event, generation_prompt=False)
        if tokens:
            self.conversation.ingest(tokens)
        self._advance_anchor(event.id)
        return len(tokens)

    def _advance_anchor(self, event_id: str) -> None:
        """Make `event_id` the last stream event the state includes, unless a later one is
        already. An event picked up late (another program's, appended before our own
        latest) must not move the anchor back: a warm boot would feed the events after it,
        which the state holds already, a second time. Ids increase in file order."""
        if self.last_event_id is None or id_order(event_id) > id_order(self.last_event_id):
            self.last_event_id = event_id

    # -- saves ------------------------------------------------------------------------------
    def save(self, wait: bool = True,
             on_done: Callable[[SaveResult], None] | None = None) -> SaveResult:
        """Checkpoint the working state, anchored at the last stream event it includes."""
        return self._save(self.transcript.awaiting_reply, wait, on_done)

    def _save(self, awaiting_reply: bool, wait: bool,
              on_done: Callable[[SaveResult], None] | None) -> SaveResult:
        self.check_usable()
        if self.last_event_id is None:
            raise StreamError("nothing to save: the session has no stream events")
        info = {"awaiting_reply": awaiting_reply, "session": self.name,
                "skipped_tokens": self.skipped_tokens}
        return self.snapshots.save(self.last_event_id, info, wait=wait, on_done=on_done)

    def check_usable(self) -> None:
        """Raise StreamError when an earlier failure left the session needing a reopen."""
        if self.unusable:
            raise StreamError(f"session {self.name!r} must be reopened: {self.unusable}")

    def check_model_files(self) -> None:
        """Before a turn changes anything: raise ModelFileChangedError when a file the
        weights are mapped from was truncated or rewritten in place, since reading it could
        kill the process (SIGBUS). A GGUF replaced on disk is only noted: the engine keeps
        running on the one it mapped."""
        try:
            notes = self.model.check_files()
        except ModelFileChangedError as exc:
            log.error("%s: %s", self.name, exc)
            raise
        for note in notes:
            log.warning("%s: %s", self.name, note)
        self.notes.extend(notes)

    def take_notes(self) -> list[str]:
        notes, self.notes = self.notes, []
        return notes
