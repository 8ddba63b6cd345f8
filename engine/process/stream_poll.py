"""Lines other programs append to an open session's stream (docs/stream.md).

A mixin of EngineServer, run on its compute thread when the watcher sees a stream grow and
before each turn. A `user` line is answered as if typed here; any other line is taken in.
A line that cannot be taken in where the ring stands (a withdrawal, or one written before
our own latest: replay.py's ring order) makes the session rebuild from its snapshot and the
stream, and then answer what waits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..session.replay import is_withdrawal
from ..session.stream import StreamEvent

if TYPE_CHECKING:
    from .runtime import SessionRuntime
    from .server import EngineServer


class StreamPolling:
    def _poll(self: EngineServer, name: str) -> None:
        """Take in events other programs appended to an open session's stream."""
        runtime = self.sessions.get(name)
        if runtime is None:
            return
        session = runtime.session
        read = session.stream.read(runtime.stream_offset)
        runtime.stream_offset = read.end_offset
        for warning in read.warnings:
            self.emit({"type": "warning", "session": name, "message": warning})
        events, runtime.unhandled = runtime.unhandled + read.events, []
        for i, event in enumerate(events):
            try:
                rebuilt = self._take_in(runtime, event, events[i + 1 :])
            except BaseException:
                runtime.unhandled = events[i + 1 :]  # the next poll (or turn) goes on here
                raise
            if rebuilt:  # the rebuild took in the rest of the batch
                pending = session.begin_pending()
                if pending is not None and not self.stopping.is_set():
                    self._answer(runtime, None, pending)
                return

    def _take_in(self: EngineServer, runtime: SessionRuntime, event: StreamEvent,
                 later: list[StreamEvent]) -> bool:
        """Take in one appended event; True where that meant rebuilding the session from
        its snapshot and the whole stream (which takes in `later` too)."""
        session = runtime.session
        if not self._announce(runtime, event):
            return False
        if event.role == "user" and not self.stopping.is_set():
            self._answer(runtime, None, session.begin_external(event))
        elif is_withdrawal(event) or session.behind_anchor(event):
            # Another program took a message back out, or wrote a line before our own
            # latest: rebuild in ring order, then (the caller) answer what waits.
            for each in later:
                self._announce(runtime, each)
            session.rebuild()
            runtime.stream_offset = session.stream_offset
            self._emit_ring(runtime, None)
            return True
        else:
            session.ingest_event(event)
            self._emit_ring(runtime, None)
        return False

    def _announce(self: EngineServer, runtime: SessionRuntime, event: StreamEvent) -> bool:
        """Tell front ends of a line another program appended; False for one of our own."""
        own = runtime.session.stream.own_ids
        if event.id in own:
            own.discard(event.id)
            return False
        self.emit({"type": "stream_event", "session": runtime.name, "id": event.id,
                   "role": event.role, "content": event.content, "ts": event.ts})
        return True
