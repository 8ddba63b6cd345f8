"""How the chat screen reacts to engine events (docs/protocol.md, "Events").

A mixin of ChatScreen. `event_handlers` is the dispatch table, one line per event type; a
handler's name is never derived from the event's (Textual routes its own messages by
`_on_<name>` and `on_<name>`, so a derived name could catch one). Events for another session
(say, the `snapshot` of a session being closed during a switch) are ignored.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from engine.paths import SessionFiles
from engine.process.protocol import PROTOCOL_VERSION

from .. import format as fmt
from ..export import ChatMessage
from ..messages import EngineFatal, EngineLost, SessionEvent
from ..widgets.boot_banner import BootBanner
from ..widgets.prompt import Prompt
from ..widgets.ring_view import RingView
from ..widgets.status_bar import StatusBar
from ..widgets.transcript import Transcript

EventHandler = Callable[[dict], Awaitable[None]]


class ChatEvents:
    async def on_session_event(self, message: SessionEvent) -> None:
        await self.handle_event(message.event)

    async def on_engine_lost(self, message: EngineLost) -> None:
        await self.engine_lost(message.description, message.stderr_tail)

    async def on_engine_fatal(self, message: EngineFatal) -> None:
        await self.show_fatal(message.message, message.detail)

    def event_handlers(self) -> dict[str, EventHandler]:
        """Event type -> handler; types not listed (`closed`, `stats`, `bye`…) need nothing
        from this screen."""
        return {
            "progress": self.handle_progress,
            "ready": self.handle_ready,
            "error": self.handle_error,
            "warning": self.handle_warning,
            "replay_progress": self.handle_replay_progress,
            "booted": self.handle_booted,
            "restored": self.handle_restored,
            "turn_started": self.handle_turn_started,
            "token": self.handle_token,
            "end_of_turn": self.handle_end_of_turn,
            "cancelling": self.handle_cancelling,
            "stream_event": self.handle_stream_event,
            "ring": self.handle_ring,
            "snapshot": self.handle_snapshot,
            "undone": self.handle_undone,
            "forked": self.handle_forked,
        }

    async def handle_event(self, event: dict) -> None:
        session = event.get("session")
        if session is not None and session != self.session:
            return
        handler = self.event_handlers().get(event.get("type", ""))
        if handler is not None:
            await handler(event)

    # -- engine lifecycle ---------------------------------------------------------------------
    async def handle_progress(self, event: dict) -> None:
        self.query_one(BootBanner).progress(
            "Building the weight image (first run only)…", event.get("done", 0),
            event.get("total", 0), tokens=False)

    async def handle_ready(self, event: dict) -> None:
        if event.get("protocol") != PROTOCOL_VERSION:
            self.notify(f"The engine speaks protocol {event.get('protocol')}; this app was "
                        f"written for {PROTOCOL_VERSION}.", severity="warning")
        status = self.query_one(StatusBar)
        status.model = event.get("model", "?")
        status.backend = event.get("backend", "")
        status.engine_state = ""
        self.open_session(self.session, cold=self.engine.take_cold())

    async def handle_error(self, event: dict) -> None:
        message = event.get("message", "unknown error")
        req = event.get("req")
        if event.get("fatal"):
            await self.show_fatal(message)
        elif req is not None and req == self.open_req:
            await self.show_fatal(f"Could not open session {self.session!r}: {message}")
        elif req is not None and req == self.current_req:
            await self._finish_current("failed", message)
            self.note(f"The turn failed: {message}", "error")
        elif req is not None and req == self.save_req:
            self.query_one(StatusBar).snapshot = {"status": "failed", "error": message}
            self.notify(f"Save failed: {message}", severity="error")
        elif req is not None and req == self.restore_req:
            self.query_one(BootBanner).show(f"Restore failed: {message}", kind="error")
        else:
            self.notify(message, title="Engine error", severity="error")

    async def handle_warning(self, event: dict) -> None:
        self.notify(event.get("message", ""), title="Warning", severity="warning")

    async def show_fatal(self, message: str, detail: str = "") -> None:
        """The engine cannot serve (bad model, unreadable data dir, …): say so plainly."""
        self.fatal = True
        self.fatal_message = message
        await self._finish_current("failed")
        self.query_one(BootBanner).show(f"⚠ {message}", detail or "Ctrl+Q quits.", "error")
        self.query_one(StatusBar).engine_state = "stopped"
        await self.query_one(Transcript).add_note(message, "error")

    async def engine_lost(self, description: str, stderr_tail: list[str]) -> None:
        """The engine exited unexpectedly; the app restarts it. The draft stays untouched."""
        await self._finish_current("interrupted")
        self.session_open = False  # the queue waits for the restarted engine's boot
        last = next((line for line in reversed(stderr_tail) if line.strip()), "")
        self.query_one(BootBanner).show(f"The engine exited ({description}) · restarting…",
                                        last, "error")
        self.query_one(StatusBar).engine_state = "restarting…"
        self.restart_note = f"The engine exited ({description}) and was restarted."
        await self.query_one(Transcript).add_note(self.restart_note, "error")

    # -- booting ------------------------------------------------------------------------------
    async def handle_replay_progress(self, event: dict) -> None:
        self.query_one(BootBanner).progress(
            f"Booting {self.session!r} · replaying the conversation…", event.get("done", 0),
            event.get("total", 0))

    async def handle_booted(self, event: dict) -> None:
        await self._rebuild(event)
        self.query_one(BootBanner).show_boot(event)
        self.session_open = True
        status = self.query_one(StatusBar)
        status.engine_state = ""
        if event.get("model"):  # sessions run on their own models (docs/models.md)
            status.model = event["model"]
        if event.get("kind") in ("warm", "cold"):
            status.boot = event
            status.snapshot, saved_at = self._snapshot_on_disk(event)
            if saved_at is not None:
                status.snapshot_saved_at = saved_at
        if self.restart_note:
            kind = "warm" if event.get("kind") == "warm" else "cold"
            await self.query_one(Transcript).add_note(
                f"{self.restart_note} It booted {kind}: {fmt.boot_line(event)}.", "info")
            self.restart_note = None
        for warning in event.get("warnings") or []:
            self.notify(warning, title="Boot warning", severity="warning")
        if not self.messages or self.messages[-1].role != "user":
            await self.send_queued()
        # else the engine answers that unanswered message first; the queue follows it.

    def _snapshot_on_disk(self, event: dict) -> tuple[dict | None, float | None]:
        """The status bar's snapshot for what a boot found, and when it was saved."""
        if event.get("kind") != "warm":
            return None, None
        try:  # the documented file layout: <data dir>/<session>.snapshot.bin
            st = SessionFiles(self.data_dir(), self.session).snapshot.stat()
        except OSError:
            return {"status": "loaded", "bytes": event.get("snapshot_bytes")}, None
        return {"status": "saved", "bytes": st.st_size}, st.st_mtime

    async def handle_restored(self, event: dict) -> None:
        await self._rebuild(event)
        self.query_one(BootBanner).show_boot(event, restored=True)
        self.session_open = True
        self.query_one(StatusBar).boot = event
        took = event.get("total_ms", event.get("restore_ms"))
        self.notify(f"Restored {event.get('restored_slots', 0):,} slots in {fmt.ms(took)}",
                    title="Restore")

    async def _rebuild(self, event: dict) -> None:
        self.messages = [ChatMessage(m.get("role", "?"), m.get("content", ""), m.get("id"),
                                     m.get("ts"), m.get("stop"))
                         for m in event.get("transcript") or [] if not m.get("hidden")]
        await self._finish_current("interrupted")
        await self.query_one(Transcript).show(self.messages)
        if self.queued is not None:  # still waiting: show it again below the transcript
            self.queued_widget = await self.query_one(Transcript).add_user(
                self.queued, via="pending")
        prompt = self.query_one(Prompt)
        prompt.past_prompts = [m.content for m in self.messages if m.role == "user"]

    # -- turns --------------------------------------------------------------------------------
    async def handle_turn_started(self, event: dict) -> None:
        if self.current is None:  # a turn we did not send: an external append, or open
            self.current = await self.query_one(Transcript).add_assistant()
        self.current_req = event.get("req")

    async def handle_token(self, event: dict) -> None:
        if self.current is None:
            self.current = await self.query_one(Transcript).add_assistant()
        await self.current.append(event.get("text", ""))

    async def handle_end_of_turn(self, event: dict) -> None:
        if self.current is None:
            self.current = await self.query_one(Transcript).add_assistant()
            await self.current.append(event.get("reply", ""))
        stop = event.get("stop", "eot")
        detail = (f"{event.get('decode_tokens', 0):,} tokens · "
                  f"{event.get('decode_tok_s', 0):.1f} tok/s")
        await self._finish_current(stop, detail)
        self.messages.append(ChatMessage("assistant", event.get("reply", ""),
                                         event.get("event_id"), None, stop))
        self.query_one(StatusBar).tok_s = event.get("decode_tok_s")
        self.note("")
        await self.send_queued()

    async def handle_cancelling(self, event: dict) -> None:
        if event.get("turn_active"):
            self.note("Stopping the reply…")

    async def handle_stream_event(self, event: dict) -> None:
        role, content = event.get("role", "?"), event.get("content", "")
        self.messages.append(ChatMessage(role, content, event.get("id"), event.get("ts")))
        if role == "user":
            await self.query_one(Transcript).add_user(content, via="sent by another program")
        else:
            await self.query_one(Transcript).add_note(f"{role} (appended): {content}")

    # -- ring and snapshots -------------------------------------------------------------------
    async def handle_ring(self, event: dict) -> None:
        self.query_one(StatusBar).ring = event
        self.query_one(RingView).update_ring(event)
        self.query_one(Transcript).show_memory(event.get("turns", []),
                                               bool(event.get("older_turns_forgotten")))

    async def handle_snapshot(self, event: dict) -> None:
        self.query_one(StatusBar).snapshot = event
        if event.get("req") is not None and event.get("req") == self.save_req:
            status = event.get("status")
            if status == "saved":
                text = (f"Snapshot saved · {fmt.size(event.get('bytes'))} in "
                        f"{fmt.ms(event.get('ms'))}")
            elif status == "exists":
                text = "Snapshot unchanged · nothing new since the last save"
            else:
                text = f"Snapshot {fmt.snapshot_text(event, None)}"
            self.notify(text, title="Save", severity="error" if status == "failed"
                        else "information")
            if status != "saving":
                self.save_req = None
