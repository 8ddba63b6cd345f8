"""How the chat screen reacts to engine events (docs/protocol.md, "Events").

A mixin of ChatScreen: each `_on_<type>` handles one event type. Events for another session
(say, the `snapshot` of a session being closed during a switch) are ignored.
"""

from __future__ import annotations

from .. import format as fmt
from ..export import ChatMessage
from ..messages import EngineFatal, EngineLost, SessionEvent
from ..widgets.boot_banner import BootBanner
from ..widgets.prompt import Prompt
from ..widgets.ring_view import RingView
from ..widgets.status_bar import StatusBar
from ..widgets.transcript import Transcript

PROTOCOL_VERSION = 1  # docs/protocol.md


class ChatEvents:
    async def on_session_event(self, message: SessionEvent) -> None:
        await self.handle_event(message.event)

    async def on_engine_lost(self, message: EngineLost) -> None:
        await self.engine_lost(message.description, message.stderr_tail)

    async def on_engine_fatal(self, message: EngineFatal) -> None:
        await self.show_fatal(message.message, message.detail)

    async def handle_event(self, event: dict) -> None:
        session = event.get("session")
        if session is not None and session != self.session:
            return
        handler = getattr(self, f"_on_{event.get('type')}", None)
        if handler is not None:
            await handler(event)

    # -- engine lifecycle ---------------------------------------------------------------------
    async def _on_progress(self, event: dict) -> None:
        self.query_one(BootBanner).progress(
            "Building the weight image (first run only)…", event.get("done", 0),
            event.get("total", 0), tokens=False)

    async def _on_ready(self, event: dict) -> None:
        if event.get("protocol") != PROTOCOL_VERSION:
            self.notify(f"The engine speaks protocol {event.get('protocol')}; this app was "
                        f"written for {PROTOCOL_VERSION}.", severity="warning")
        self.query_one(StatusBar).update_fields(model=event.get("model", "?"),
                                                backend=event.get("backend", ""),
                                                engine_state="")
        self.open_session(self.session, cold=self.channel.take_cold())

    async def _on_error(self, event: dict) -> None:
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
            self.query_one(StatusBar).update_fields(
                snapshot={"status": "failed", "error": message})
            self.notify(f"Save failed: {message}", severity="error")
        elif req is not None and req == self.restore_req:
            self.query_one(BootBanner).show(f"Restore failed: {message}", kind="error")
        else:
            self.notify(message, title="Engine error", severity="error")

    async def _on_warning(self, event: dict) -> None:
        self.notify(event.get("message", ""), title="Warning", severity="warning")

    async def show_fatal(self, message: str, detail: str = "") -> None:
        """The engine cannot serve (bad model, unreadable data dir, …): say so plainly."""
        self.fatal = True
        self.fatal_message = message
        await self._finish_current("failed")
        self.query_one(BootBanner).show(f"⚠ {message}", detail or "Ctrl+Q quits.", "error")
        self.query_one(StatusBar).update_fields(engine_state="stopped")
        await self.query_one(Transcript).add_note(message, "error")

    async def engine_lost(self, description: str, stderr_tail: list[str]) -> None:
        """The engine exited unexpectedly; the app restarts it. The draft stays untouched."""
        await self._finish_current("interrupted")
        last = next((line for line in reversed(stderr_tail) if line.strip()), "")
        self.query_one(BootBanner).show(f"The engine exited ({description}) · restarting…",
                                        last, "error")
        self.query_one(StatusBar).update_fields(engine_state="restarting…")
        self.restart_note = f"The engine exited ({description}) and was restarted."
        await self.query_one(Transcript).add_note(self.restart_note, "error")

    # -- booting ------------------------------------------------------------------------------
    async def _on_replay_progress(self, event: dict) -> None:
        self.query_one(BootBanner).progress(
            f"Booting {self.session!r} · replaying the conversation…", event.get("done", 0),
            event.get("total", 0))

    async def _on_booted(self, event: dict) -> None:
        await self._rebuild(event)
        self.query_one(BootBanner).show_boot(event)
        status = self.query_one(StatusBar)
        status.update_fields(engine_state="")
        if event.get("model"):  # sessions run on their own models (docs/models.md)
            status.update_fields(model=event["model"])
        if event.get("kind") in ("warm", "cold"):
            status.update_fields(boot=event, **self._snapshot_on_disk(event))
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

    def _snapshot_on_disk(self, event: dict) -> dict:
        """Status-bar fields for the snapshot a boot found: when it was saved, how big."""
        if event.get("kind") != "warm":
            return {"snapshot": None}
        try:  # the documented file layout: <data dir>/<session>.snapshot.bin
            st = (self.data_dir() / f"{self.session}.snapshot.bin").stat()
        except OSError:
            return {"snapshot": {"status": "loaded", "bytes": event.get("snapshot_bytes")}}
        return {"snapshot": {"status": "saved", "bytes": st.st_size},
                "snapshot_saved_at": st.st_mtime}

    async def _on_restored(self, event: dict) -> None:
        await self._rebuild(event)
        self.query_one(BootBanner).show_boot(event, restored=True)
        self.query_one(StatusBar).update_fields(boot=event)
        took = event.get("total_ms", event.get("restore_ms"))
        self.notify(f"Restored {event.get('restored_slots', 0):,} slots in {fmt.ms(took)}",
                    title="Restore")

    async def _rebuild(self, event: dict) -> None:
        self.messages = [ChatMessage(m.get("role", "?"), m.get("content", ""), m.get("id"),
                                     m.get("ts"), m.get("stop"))
                         for m in event.get("transcript") or []]
        await self._finish_current("interrupted")
        await self.query_one(Transcript).show(self.messages)
        prompt = self.query_one(Prompt)
        prompt.past_prompts = [m.content for m in self.messages if m.role == "user"]

    # -- turns --------------------------------------------------------------------------------
    async def _on_turn_started(self, event: dict) -> None:
        if self.current is None:  # a turn we did not send: an external append, or open
            self.current = await self.query_one(Transcript).add_assistant()
        self.current_req = event.get("req")

    async def _on_token(self, event: dict) -> None:
        if self.current is None:
            self.current = await self.query_one(Transcript).add_assistant()
        await self.current.append(event.get("text", ""))

    async def _on_end_of_turn(self, event: dict) -> None:
        if self.current is None:
            self.current = await self.query_one(Transcript).add_assistant()
            await self.current.append(event.get("reply", ""))
        stop = event.get("stop", "eot")
        detail = (f"{event.get('decode_tokens', 0):,} tokens · "
                  f"{event.get('decode_tok_s', 0):.1f} tok/s")
        await self._finish_current(stop, detail)
        self.messages.append(ChatMessage("assistant", event.get("reply", ""),
                                         event.get("event_id"), None, stop))
        self.query_one(StatusBar).update_fields(tok_s=event.get("decode_tok_s"))
        self.note("")
        await self.send_queued()

    async def _on_cancelling(self, event: dict) -> None:
        if event.get("turn_active"):
            self.note("Stopping the reply…")

    async def _on_stream_event(self, event: dict) -> None:
        role, content = event.get("role", "?"), event.get("content", "")
        self.messages.append(ChatMessage(role, content, event.get("id"), event.get("ts")))
        if role == "user":
            await self.query_one(Transcript).add_user(content, via="sent by another program")
        else:
            await self.query_one(Transcript).add_note(f"{role} (appended): {content}")

    # -- ring and snapshots -------------------------------------------------------------------
    async def _on_ring(self, event: dict) -> None:
        self.query_one(StatusBar).update_fields(ring=event)
        self.query_one(RingView).update_ring(event)

    async def _on_snapshot(self, event: dict) -> None:
        self.query_one(StatusBar).update_fields(snapshot=event)
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
