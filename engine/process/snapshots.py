"""Requests and timers that save or restore a session's snapshot (docs/protocol.md).

A mixin of EngineServer, run on its compute thread: `save`, `restore` and `boot_compare`
requests, the debounced autosave after a turn, and the flush on close and shutdown. A
session whose state cannot be trusted is never saved over the snapshot on disk.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..snapshot.snapshotter import SaveResult
from .runtime import SessionRuntime, boot_fields, save_fields, transcript_fields

if TYPE_CHECKING:
    from .protocol import Request
    from .server import EngineServer


class SnapshotRequests:
    def _on_save(self: EngineServer, request: Request) -> None:
        runtime = self._runtime(request)
        runtime.disarm_debounce()
        self._save(runtime, request.id, wait=True)

    def _on_restore(self: EngineServer, request: Request) -> None:
        runtime = self._runtime(request)
        runtime.disarm_debounce()
        t0 = time.perf_counter()
        report = runtime.session.restore_now()
        runtime.stream_offset = runtime.session.stream.read().end_offset
        self.emit({"type": "restored", "req": request.id, "session": runtime.name,
                   **boot_fields(report), "total_ms": round((time.perf_counter() - t0) * 1e3, 3),
                   "transcript": transcript_fields(runtime.session)})
        self._emit_ring(runtime, request.id)

    def _save(self: EngineServer, runtime: SessionRuntime, request_id, wait: bool) -> SaveResult:
        def done(result: SaveResult) -> None:
            self._snapshot_event(runtime, request_id, save_fields(result))

        if not wait:
            self._snapshot_event(runtime, request_id, {"status": "saving"})
        runtime.session.snapshots.wait()
        return runtime.session.save(wait=wait, on_done=done)

    def _autosave(self: EngineServer, name: str) -> None:
        runtime = self.sessions.get(name)
        if runtime is not None and not runtime.turn_active and not self.stopping.is_set():
            self._save(runtime, None, wait=False)

    def _snapshot_event(self: EngineServer, runtime: SessionRuntime, request_id,
                        fields: dict) -> None:
        runtime.snapshot_state = fields["status"]
        self.emit({"type": "snapshot", "req": request_id, "session": runtime.name, **fields})

    def _flush(self: EngineServer, runtime: SessionRuntime, request_id) -> None:
        runtime.disarm_debounce()
        if runtime.session.unusable:  # its state must not replace the snapshot on disk
            self._snapshot_event(runtime, request_id, {
                "status": "failed", "error": f"not saved: {runtime.session.unusable}"})
            return
        self._save(runtime, request_id, wait=True)

    def _on_boot_compare(self: EngineServer, request: Request) -> None:
        from ..session.boot_compare import compare_boots

        runtime = self._runtime(request)
        self._save(runtime, request.id, wait=True)

        def progress(done: int, total: int) -> None:  # the cold boot is the long one
            self.emit({"type": "replay_progress", "req": request.id, "session": runtime.name,
                       "done": done, "total": total})

        result = compare_boots(runtime.session.model, self.data_dir, runtime.name,
                               self.placement.policy(runtime.session.model.config),
                               self.placement.backend(runtime.session.model.config), progress)
        self.emit({"type": "boot_compare", "req": request.id, "session": runtime.name,
                   **result})
