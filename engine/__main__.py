"""`python -m engine`: the engine child process (docs/protocol.md).

stdout carries protocol events only; logs go to stderr and to `engine.log` in the data
directory. Any of `shutdown`, SIGINT, SIGTERM, SIGHUP, end of stdin or the parent's death
flushes every open session's snapshot synchronously, then the process exits.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from .errors import ChannelError, UnusableFileError
from .fileio import open_regular
from .paths import default_cache_dir, default_data_dir
from .process.flags import add_engine_flags
from .process.protocol import (
    PROTOCOL_VERSION,
    Limits,
    data_dir_problem,
    encode_event,
)

log = logging.getLogger("channel.engine")
PR_SET_PDEATHSIG = 1


class StdoutEmitter:
    """Writes one event per line; safe from any thread; a vanished reader is not an error.

    Events go out as UTF-8 bytes whatever the locale: the protocol is UTF-8, and a text
    stream in another encoding would fail on the first character it cannot encode.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._out = sys.stdout.buffer
        self.broken = threading.Event()

    def __call__(self, event: dict) -> None:
        text = encode_event({k: v for k, v in event.items() if v is not None}) + "\n"
        line = text.encode("utf-8")
        with self._lock:
            if self.broken.is_set():
                return
            try:
                self._out.write(line)
                self._out.flush()
            except (BrokenPipeError, ValueError, OSError):
                self.broken.set()


def prepare_data_dir(path: Path) -> str | None:
    """Create `path` (private) if missing; a note if an existing one was made private.
    Raises ChannelError, with one line, when sessions cannot live there."""
    problem, note = data_dir_problem(path, make_private=True)
    if problem:
        raise ChannelError(problem)
    return note


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m engine", description=__doc__)
    add_engine_flags(p)
    args = p.parse_args(argv)
    args.model = Path(args.model) if args.model is not None else None
    return args


def setup_logging(data_dir: Path | None) -> None:
    """Log to stderr, and to `engine.log` in the data directory when there is one."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if data_dir is not None:
        try:  # private, and never through a link planted at its name
            fd = open_regular(data_dir / "engine.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            handlers.append(logging.StreamHandler(os.fdopen(fd, "a", encoding="utf-8")))
        except (OSError, UnusableFileError) as exc:
            print(f"channel engine: cannot write a log in {data_dir}: "
                  f"{getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
    logging.basicConfig(level=logging.INFO, handlers=handlers,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def die_with_parent() -> None:
    """Ask Linux to SIGTERM us when the parent dies (a poll thread covers other systems)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def load_placed(placement, path: Path | None, cache_dir: Path, progress):
    """Load a model with the weights its placed backend needs: a model for the GPU backend
    needs no f32 image unless `auto` moves it to the numpy backend."""
    from .model.model import load_model

    model = load_model(path, cache_dir, progress,
                       f32_weights=placement.choice.backend.needs_f32_weights)
    if placement.backend(model.config).needs_f32_weights and model.weights is None:
        model = load_model(path, cache_dir, progress, f32_weights=True)
    return model


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data_dir = args.data_dir or default_data_dir()
    emit = StdoutEmitter()
    try:
        limits = Limits(max_message_bytes=args.max_message_bytes)
        note = prepare_data_dir(data_dir)
    except (ChannelError, ValueError) as exc:
        setup_logging(None)
        emit({"type": "error", "code": "fatal", "fatal": True, "message": str(exc)})
        log.error("%s", exc)
        return 2
    setup_logging(data_dir)
    if note:
        log.warning("%s", note)
        emit({"type": "warning", "message": note})
    parent = os.getppid()
    die_with_parent()
    # A file-size limit must fail a write (EFBIG, reported like a full disk), not kill us.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    stop_early = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda *_: stop_early.set())

    from .backends.select import Placement, backend_for_model
    from .state.ring_policy import RingPolicy

    def progress(done: int, total: int) -> None:
        emit({"type": "progress", "phase": "weights", "done": done, "total": total})

    cache_dir = args.cache_dir or default_cache_dir()
    try:
        choice = backend_for_model(args.backend, args.model, cache_dir)
        if choice.note:
            log.warning("%s", choice.note)
            emit({"type": "warning", "message": choice.note})
        placement = Placement(choice, args.backend, cache_dir, args.ring_slots, args.evict)
        model = load_placed(placement, args.model, cache_dir, progress)
        if args.ring_slots:  # asked for: refused here if longer than the default model's context
            RingPolicy.for_model(model.config, slots=args.ring_slots)
    except (ChannelError, ValueError, OSError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        emit({"type": "error", "code": "fatal", "fatal": True, "message": message})
        log.error("%s", message)
        return 2
    if stop_early.is_set():
        emit({"type": "bye", "reason": "stopped while loading"})
        return 0

    from .model.catalog_sources import default_roots
    from .process.reader import read_requests
    from .process.server import EngineServer
    from .process.session_models import SessionModels
    from .snapshot.snapshotter import ChainSettings

    def load_another(path: Path):  # a session's recorded model, or one `open` names
        return load_placed(placement, path, cache_dir, progress)

    models = SessionModels(model, data_dir, load_another, default_roots(os.environ, Path.home()))
    if args.keep_turns < 1 or not args.compact_share > 0:
        message = (f"--keep-turns must be at least 1 (got {args.keep_turns}) and "
                   f"--compact-share above 0 (got {args.compact_share})")
        emit({"type": "error", "code": "fatal", "fatal": True, "message": message})
        return 2
    chain = ChainSettings(args.keep_turns, args.compact_share)
    server = EngineServer(model, data_dir, emit, args.debounce_s, placement, limits, models,
                          chain)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda n, _f: server.request_shutdown(signal.Signals(n).name))

    def read_stdin() -> None:
        read_requests(lambda n: os.read(sys.stdin.fileno(), n), limits.max_line_bytes,
                      server.submit_line, server.reader_failed, server.request_shutdown)

    def watch_parent() -> None:
        while not server.done.wait(0.5):
            if os.getppid() != parent or emit.broken.is_set():
                server.request_shutdown("parent exited")
                return

    threading.Thread(target=read_stdin, name="stdin", daemon=True).start()
    threading.Thread(target=watch_parent, name="parent-watch", daemon=True).start()
    compute = threading.Thread(target=server.run, name="compute")
    compute.start()
    emit({"type": "ready", "protocol": PROTOCOL_VERSION, **{
        k: v for k, v in server.hello_event().items() if k not in ("type", "req")}})
    log.info("ready: %s, data in %s", model.name, data_dir)
    while not server.done.wait(0.2):  # the main thread stays free to run signal handlers
        pass
    compute.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
