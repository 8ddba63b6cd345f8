"""The engine process's request loop (docs/protocol.md).

Threads: a reader (reader.py) hands stdin lines to `submit_line`, which validates each in
full (protocol.py) and turns it into a job; `cancel`, `stats`, `models` and `shutdown` act at
once, so a long prefill never leaves the engine unobservable. One compute thread runs jobs in
order, so a session's state is only ever changed there; snapshot writers and debounce timers
run beside it and hand their results back as events or jobs.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from pathlib import Path

from ..allocs import rss_mb
from ..backends.numpy.backend import NumpyBackend
from ..backends.select import Choice, Placement
from ..errors import ChannelError
from ..model.model import Model
from ..session.alternatives import reply_origin
from ..session.answering import TurnResult
from ..session.stream import StreamEvent
from ..session.turns import PendingTurn
from ..snapshot.snapshotter import ChainSettings
from ..state.sampling_defaults import defaults_for
from .edits import TurnEdits
from .opening import SessionOpening
from .protocol import (
    PROTOCOL_VERSION,
    Limits,
    ProtocolError,
    Request,
    parse_request,
)
from .runtime import SessionRuntime, ring_summary
from .session_models import SessionModels
from .snapshots import SnapshotRequests
from .stream_poll import StreamPolling
from .watch import StreamWatcher

log = logging.getLogger("channel.engine")
Emit = Callable[[dict], None]
Handler = Callable[[Request], None]
DEFAULT_MAX_TOKENS = 512


class EngineServer(SessionOpening, TurnEdits, SnapshotRequests, StreamPolling):
    def __init__(self, model: Model, data_dir: Path, emit: Emit, debounce_s: float = 5.0,
                 placement: Placement | None = None, limits: Limits | None = None,
                 models: SessionModels | None = None, chain: ChainSettings | None = None):
        self.model = model  # the default: new sessions run on it unless they ask for another
        # Every loaded model, and which model each session runs on (its recorded one).
        self.models = models or SessionModels(model, Path(data_dir))
        self.limits = limits or Limits()
        self.data_dir = Path(data_dir)
        self.emit = emit
        self.debounce_s = debounce_s
        self.chain = chain or ChainSettings()  # each session's snapshot chain settings
        # Each model's backend and ring size: the process's choice, fitted to the model.
        self.placement = placement or Placement(Choice(NumpyBackend(), None), "numpy")
        self.sessions: dict[str, SessionRuntime] = {}
        self.jobs: queue.Queue = queue.Queue()
        self.stopping = threading.Event()
        self.done = threading.Event()
        self.watcher = StreamWatcher(self.data_dir, lambda name: self.jobs.put(("poll", name)))
        # Requests that only read (a copy of) the engine's state are answered at once on the
        # reader thread, beside a running reply; `cancel` and `shutdown` act at once too.
        self.immediate: dict[str, Handler] = {"stats": self._on_stats,
                                              "models": self._on_models}
        # The requests the compute thread serves, in order, one line each.
        self.handlers: dict[str, Handler] = {
            "hello": self._on_hello,
            "open": self._on_open,
            "turn": self._on_turn,
            "regenerate": self._on_regenerate,
            "undo": self._on_undo,
            "fork": self._on_fork,
            "rewind": self._on_rewind,
            "save": self._on_save,
            "restore": self._on_restore,
            "boot_compare": self._on_boot_compare,
            "close": self._on_close,
        }

    # -- called from other threads --------------------------------------------------------
    def submit_line(self, line: bytes | str) -> None:
        """Validate one request line in full, then act on it or queue it (reader thread)."""
        try:
            request = parse_request(line, self.limits)
        except ProtocolError as exc:
            self.emit({"type": "error", "req": exc.request_id, "code": "bad_request",
                       "message": str(exc)})
            return
        if request.type == "cancel":
            self._cancel(request)
        elif request.type == "shutdown":
            self.request_shutdown("shutdown requested", request.id)
        elif request.type in self.immediate:
            try:
                self.immediate[request.type](request)
            except ValueError as exc:
                self._error(request, type(exc).__name__, _one_line(exc))
        else:
            self.jobs.put(("request", request))

    def reader_failed(self, exc: BaseException) -> None:
        """A line the reader could not hand over (a bug): said, and the reader goes on."""
        self.emit({"type": "error", "code": "internal", "message": _one_line(exc)})

    def request_shutdown(self, reason: str, request_id=None) -> None:
        if self.stopping.is_set():
            return
        log.info("shutting down: %s", reason)
        self.stopping.set()
        for runtime in list(self.sessions.values()):  # a copy: the compute thread may add one
            runtime.cancel.set()
        self.jobs.put(("shutdown", request_id, reason))

    def _cancel(self, request: Request) -> None:
        runtime = self.sessions.get(request.session or "")
        if runtime is None:
            self._error(request, "unknown_session", f"session {request.session!r} is not open")
            return
        runtime.cancel.set()
        self.emit({"type": "cancelling", "req": request.id, "session": runtime.name,
                   "turn_active": runtime.turn_active})

    # -- the compute thread -----------------------------------------------------------------
    def run(self) -> None:
        try:
            self.watcher.start()
            while True:
                job = self.jobs.get()
                if job[0] == "shutdown":
                    self._shutdown(job[1], job[2])
                    return
                try:
                    self._dispatch(job)
                except Exception as exc:  # never let one job take the engine down
                    log.exception("job %s failed", job[0])
                    request = job[1] if job[0] == "request" else None
                    self._error(request, "internal", _one_line(exc))
        finally:
            self.watcher.stop()
            self.done.set()

    def _dispatch(self, job: tuple) -> None:
        kind = job[0]
        if kind == "poll":
            self._poll(job[1])
        elif kind == "autosave":
            self._autosave(job[1])
        elif self.stopping.is_set():
            self._error(job[1], "shutting_down", "the engine is shutting down")
        else:
            request: Request = job[1]
            handler = self.handlers.get(request.type)
            if handler is None:  # parsed, yet not served here: a table missing a line
                self._error(request, "internal", f"no handler for {request.type!r}")
                return
            try:
                handler(request)
            except (ChannelError, ValueError, OSError) as exc:
                self._error(request, type(exc).__name__, _one_line(exc))

    def _error(self, request: Request | None, code: str, message: str) -> None:
        event = {"type": "error", "code": code, "message": message}
        if request is not None:
            event["req"] = request.id
            if request.session:
                event["session"] = request.session
        self.emit(event)

    def _runtime(self, request: Request) -> SessionRuntime:
        runtime = self.sessions.get(request.session or "")
        if runtime is None:
            raise ValueError(f"session {request.session!r} is not open")
        return runtime

    # -- requests ---------------------------------------------------------------------------
    def _on_hello(self, request: Request) -> None:
        self.emit(self.hello_event(request.id))

    def hello_event(self, request_id=None) -> dict:
        backend = self.placement.backend(self.model.config).describe()
        return {"type": "hello", "req": request_id, "protocol": PROTOCOL_VERSION,
                "model": self.model.name, "model_path": str(self.model.path),
                "fingerprint": self.model.fingerprint, "backend": backend["backend"],
                "backend_info": backend, "data_dir": str(self.data_dir),
                "sessions": sorted(self.sessions)}

    def _on_turn(self, request: Request) -> None:
        runtime = self._runtime(request)
        # Messages other programs queued are answered first, in the stream's order: the
        # ring then takes every message in the order a replay would.
        self._poll(runtime.name)
        # Everything about the request was checked when it was parsed; the template renders
        # the message before it is logged, so a failure here leaves no trace in the stream.
        pending = runtime.session.begin_turn(request.args["text"], request.args.get("max_tokens"))
        self._answer(runtime, request.id, pending, request.settings,
                     request.args.get("max_tokens"))

    def _answer(self, runtime: SessionRuntime, request_id, pending: PendingTurn,
                asked: dict[str, float | int] | None = None,
                max_tokens: int | None = None, reuse: StreamEvent | None = None) -> TurnResult:
        """Answer a logged message with the model's default sampling, overridden by what
        the request `asked` for (docs/protocol.md, "Sampling"), or with an earlier reply
        to it (`reuse`: session/alternatives.py)."""
        runtime.disarm_debounce()
        runtime.cancel.clear()
        if self.stopping.is_set():
            runtime.cancel.set()
        runtime.turn_active = True
        name = runtime.name
        # The message is in the stream (fsynced) by now: turn_started acknowledges it.
        self.emit({"type": "turn_started", "req": request_id, "session": name,
                   "user_event_id": pending.event.id})
        for note in runtime.session.take_notes():  # a model file replaced on disk
            self.emit({"type": "warning", "req": request_id, "session": name, "message": note})

        def on_text(piece: str) -> None:
            self.emit({"type": "token", "req": request_id, "session": name, "text": piece})

        def on_read(done: int, total: int) -> None:
            self.emit({"type": "prefill_progress", "req": request_id, "session": name,
                       "done": done, "total": total})

        if max_tokens is None:  # a message found waiting says what its sender asked for
            max_tokens = DEFAULT_MAX_TOKENS if pending.max_tokens is None else pending.max_tokens
        try:
            settings = defaults_for(runtime.session.model.recommended_sampling).with_overrides(
                asked or {})
            result = runtime.session.respond(
                pending, settings, max_tokens, on_text=on_text,
                should_stop=runtime.cancel.is_set, shutting_down=self.stopping.is_set,
                on_read=on_read, reuse=reuse)
        finally:
            runtime.turn_active = False
        ring = runtime.session.conversation.ring
        self.emit({"type": "end_of_turn", "req": request_id, "session": name,
                   "reply": result.reply, "stop": result.stop, "event_id": result.event_id,
                   "prompt_tokens": result.prompt_tokens, "decode_tokens": len(result.reply_ids),
                   **result.speed_fields(), "seed": result.seed, "clock": ring.clock,
                   **({"withdraws": result.withdraws} if result.withdraws else {}),
                   **({"restores": reply_origin(reuse)} if reuse is not None else {})})
        self._emit_ring(runtime, request_id)
        if not self.stopping.is_set():
            runtime.arm_debounce(self.debounce_s, lambda: self.jobs.put(("autosave", name)))
            self._snapshot_event(runtime, None, {"status": "pending",
                                                 "due_in_ms": round(self.debounce_s * 1e3)})
        return result

    def _on_stats(self, request: Request) -> None:
        # Runs on the reader thread, beside the compute thread: it only reads, and works on
        # a copy of the session table, which the compute thread may change meanwhile.
        open_sessions = dict(self.sessions)
        names = [request.session] if request.session else sorted(open_sessions)
        sessions = {}
        for name in names:
            runtime = open_sessions.get(name)
            if runtime is None:
                raise ValueError(f"session {name!r} is not open")
            sessions[name] = runtime.stats()
        engine = {k: v for k, v in self.hello_event().items()
                  if k not in ("type", "req", "sessions")}
        self.emit({"type": "stats", "req": request.id, **engine, "sessions": sessions,
                   "rss_mb": round(rss_mb()[0], 1)})

    def _on_models(self, request: Request) -> None:
        self.emit({"type": "models", "req": request.id, "models": self.models.catalog()})

    def _shutdown(self, request_id, reason: str) -> None:
        for runtime in list(self.sessions.values()):
            try:
                self._flush(runtime, request_id)
            except Exception as exc:  # keep flushing the other sessions
                log.exception("flush of %s failed", runtime.name)
                self._snapshot_event(runtime, request_id,
                                     {"status": "failed", "error": _one_line(exc)})
            runtime.session.close()  # before `bye`: a Channel started at once may open it
        self.emit({"type": "bye", "req": request_id, "reason": reason})

    def _emit_ring(self, runtime: SessionRuntime, request_id) -> None:
        self.emit({"type": "ring", "req": request_id, "session": runtime.name,
                   **ring_summary(runtime.session)})


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__
