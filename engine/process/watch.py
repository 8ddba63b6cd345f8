"""Watching session streams for lines other programs append (watchdog)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from ..paths import STREAM_SUFFIX

log = logging.getLogger("channel.engine")
INACTIVE_EMITTER = "called when the thread is inactive"


class _StopRaceFilter(logging.Filter):
    """Drops watchdog's report of its own stop: stopping wakes the emitter thread out of its
    blocking read, and it then logs this at ERROR level on every clean shutdown (watchdog
    7's inotify emitter), though nothing is lost: we stop watching on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return INACTIVE_EMITTER not in record.getMessage()


logging.getLogger("watchdog.observers.inotify").addFilter(_StopRaceFilter())


class _Handler(FileSystemEventHandler):
    def __init__(self, on_change: Callable[[str], None]):
        self.on_change = on_change

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type not in ("modified", "created", "moved",
                                                          "closed"):
            return
        path = str(getattr(event, "dest_path", "") or event.src_path)
        if path.endswith(STREAM_SUFFIX):
            self.on_change(Path(path).name[: -len(STREAM_SUFFIX)])


class StreamWatcher:
    """Calls on_change(session_name) whenever `NAME.stream.jsonl` in `directory` changes.

    Callers re-read from their last offset, so duplicate or coalesced notifications are
    harmless.
    """

    def __init__(self, directory: Path, on_change: Callable[[str], None]):
        self.directory = Path(directory)
        self.on_change = on_change
        self._observer = None

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        observer = Observer()
        observer.schedule(_Handler(self.on_change), str(self.directory), recursive=False)
        observer.daemon = True
        try:
            observer.start()
        except OSError as exc:  # e.g. inotify watch limits: work on without live ingestion
            log.warning("cannot watch %s (%s): appends by other programs are picked up at the "
                        "next open", self.directory, exc.strerror)
            return
        self._observer = observer

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=2)
            self._observer = None
