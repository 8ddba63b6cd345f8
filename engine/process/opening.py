"""Opening and closing sessions (a mixin of EngineServer, server.py).

An `open` takes the session's lock before it loads anything (one writer per session), boots
warm or cold with progress, and then answers a message left waiting. A shutdown during a
long cold replay abandons the open: a half-replayed ring is never registered, so never saved.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import SessionBusyError
from ..session.owner import acquire_session
from ..session.session import Session
from .protocol import SESSION_BUSY, Request
from .runtime import SessionRuntime, boot_fields, ring_size_fields, transcript_fields

if TYPE_CHECKING:
    from .server import EngineServer


class BootAbandoned(Exception):
    """Raised from a replay progress callback to stop opening a session."""


class SessionOpening:
    def _on_open(self: EngineServer, request: Request) -> None:
        name = request.session
        if name in self.sessions:
            runtime = self.sessions[name]
            self.models.check_same(name, runtime.session.model, request.args.get("model"))
            self.emit({"type": "booted", "req": request.id, "session": name, "kind": "open",
                       "reason": "already open", "transcript": transcript_fields(runtime.session)})
            self._emit_ring(runtime, request.id)
            self._warn_if_it_keeps_its_system_prompt(runtime.session, request)
            return
        try:  # one writer per session; asked first, so a refusal loads no model
            owner = acquire_session(self.data_dir, name)
        except SessionBusyError as exc:
            self._error(request, SESSION_BUSY, str(exc))
            return
        try:
            model_path = request.args.get("model")
            model = self.models.for_session(name, Path(model_path) if model_path else None)
            session = Session(model, self.data_dir, name, self.placement.policy(model.config),
                              self.placement.backend(model.config))
            self.chain.apply(session.snapshots)
        except BaseException:
            owner.release()
            raise

        def progress(done: int, total: int) -> None:
            self.emit({"type": "replay_progress", "req": request.id, "session": name,
                       "done": done, "total": total})
            if self.stopping.is_set():
                raise BootAbandoned  # a long cold replay must not hold up a shutdown

        try:
            report = session.open(bool(request.args.get("cold")), progress, owner,
                                  request.args.get("system"))
        except BootAbandoned:
            # Never registered, so never flushed: a half-replayed ring is not saved.
            self._error(request, "shutting_down", f"opening {name!r} abandoned: shutting down")
            return
        runtime = SessionRuntime(session, stream_offset=session.stream_offset)
        self.sessions[name] = runtime
        note = self.models.remember(name, model)
        if note:
            self.emit({"type": "warning", "req": request.id, "session": name, "message": note})
        self.emit({"type": "booted", "req": request.id, "session": name, **boot_fields(report),
                   **self.models.fields(model), **ring_size_fields(session.conversation),
                   "transcript": transcript_fields(runtime.session)})
        self._emit_ring(runtime, request.id)
        self._warn_if_it_keeps_its_system_prompt(session, request)
        self._poll(name)  # anything appended while we booted
        pending = session.begin_pending()
        if pending is not None and not self.stopping.is_set():
            self._answer(runtime, request.id, pending)

    def _warn_if_it_keeps_its_system_prompt(self: EngineServer, session: Session,
                                            request: Request) -> None:
        """An `open` asked for a system prompt the session was not started with: it
        applies to a new session only; say so rather than ignore it."""
        if session.keeps_its_system_prompt(request.args.get("system")):
            self.emit({"type": "warning", "req": request.id, "session": session.name,
                       "message": f"session {session.name!r} keeps its system prompt: a new "
                                  "one applies to a new session, or to a fork of this one"})

    def _on_close(self: EngineServer, request: Request) -> None:
        runtime = self._runtime(request)
        self._flush(runtime, request.id)
        del self.sessions[runtime.name]
        runtime.session.close()  # another Channel may open it now
        self.models.release(runtime.name)
        self.emit({"type": "closed", "req": request.id, "session": runtime.name})
