"""How the chat screen reacts to engine events (docs/protocol.md, "Events").

A mixin of ChatScreen. `event_handlers` is the dispatch table, one line per event type: what
an event of that type means for the screen, whoever caused it. An event answering one of the
screen's own requests may be taken by that request's answer first (screens/chat_answers.py).
A handler's name is never derived from the event's (Textual routes its own messages by
`_on_<name>` and `on_<name>`, so a derived name could catch one). Events for another session
(say, the `snapshot` of a session being closed during a switch) are ignored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.paths import SessionFiles
from engine.process.protocol import PROTOCOL_VERSION

from .. import format as fmt
from ..export import ChatMessage
from ..messages import EngineFatal, EngineLost, SessionEvent
from ..replies import ReplyChoices
from ..widgets.message_widgets import WITHDRAWN

if TYPE_CHECKING:
    from engine.process.events import (
        Booted,
        EndOfTurn,
        Error,
        Event,
        Progress,
        Ready,
        Rewound,
        Token,
        TurnStarted,
        Undone,
    )

    from .chat_answers import EventHandler


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
            "prefill_progress": self.handle_prefill_progress,
            "token": self.handle_token,
            "end_of_turn": self.handle_end_of_turn,
            "cancelling": self.handle_cancelling,
            "stream_event": self.handle_stream_event,
            "ring": self.handle_ring,
            "snapshot": self.handle_snapshot,
            "undone": self.handle_undone,
            "forked": self.handle_forked,
            "rewound": self.handle_rewound,
        }

    async def handle_event(self, event: Event) -> None:
        session = event.get("session")
        if session is not None and session != self.session:
            return
        kind = event.get("type", "")
        handler = self.event_handlers().get(kind)
        answer = self.take_answer(event)
        if answer is not None:
            handler = answer.handlers.get(kind, handler)
        if handler is not None:
            await handler(event)

    # -- engine lifecycle ---------------------------------------------------------------------
    async def handle_progress(self, event: Event) -> None:
        self.banner.progress("Building the weight image (first run only)…",
                             event.get("done", 0), event.get("total", 0), tokens=False)

    async def handle_ready(self, event: Ready) -> None:
        if event.get("protocol") != PROTOCOL_VERSION:
            self.notify(f"The engine speaks protocol {event.get('protocol')}; this app was "
                        f"written for {PROTOCOL_VERSION}.", severity="warning")
        self.status_bar.model = event.get("model", "?")
        self.status_bar.backend = event.get("backend", "")
        self.open_session(self.session, cold=self.engine.take_cold())

    async def handle_error(self, event: Error) -> None:
        """An error no request of ours answers for (chat_answers.py): a fatal one, a refused
        line, or the failure of a request that has no answer of its own (undo, fork…)."""
        message = event.get("message", "unknown error")
        if event.get("fatal"):
            await self.show_fatal(message)
        else:
            self.notify(message, title="Engine error", severity="error")

    async def handle_warning(self, event: Event) -> None:
        self.notify(event.get("message", ""), title="Warning", severity="warning")

    async def show_fatal(self, message: str, detail: str = "") -> None:
        """The engine cannot serve (bad model, unreadable data dir, …): say so plainly."""
        self.fatal_message = message
        self.fatal = True
        await self._finish_current("failed")
        self.banner.show(f"⚠ {message}", detail or "Ctrl+Q quits.", "error")
        await self.transcript.add_note(message, "error")

    async def engine_lost(self, description: str, stderr_tail: list[str]) -> None:
        """The engine exited unexpectedly; the app restarts it. The draft stays untouched."""
        self.answers.clear()  # request ids start again at 1 with the next engine process
        await self._finish_current("interrupted")
        self.session_open = False  # the queue waits for the restarted engine's boot
        last = next((line for line in reversed(stderr_tail) if line.strip()), "")
        self.banner.show(f"The engine exited ({description}) · restarting…", last, "error")
        self.status_bar.engine_state = "restarting…"
        self.restart_note = f"The engine exited ({description}) and was restarted."
        await self.transcript.add_note(self.restart_note, "error")

    # -- booting ------------------------------------------------------------------------------
    async def handle_replay_progress(self, event: Event) -> None:
        self.banner.progress(f"Booting {self.session!r} · replaying the conversation…",
                             event.get("done", 0), event.get("total", 0))

    async def handle_booted(self, event: Booted) -> None:
        await self._rebuild(event)
        self.banner.show_boot(event)
        self.session_open = True
        self.ring_slots = event.get("ring_slots") or self.ring_slots
        status = self.status_bar
        if event.get("model"):  # sessions run on their own models (docs/models.md)
            status.model = event["model"]
        if event.get("kind") in ("warm", "cold"):
            status.boot = event
            status.snapshot, saved_at = self._snapshot_on_disk(event)
            if saved_at is not None:
                status.snapshot_saved_at = saved_at
        if self.restart_note:
            kind = "warm" if event.get("kind") == "warm" else "cold"
            await self.transcript.add_note(
                f"{self.restart_note} It booted {kind}: {fmt.boot_line(event)}.", "info")
            self.restart_note = None
        for warning in event.get("warnings") or []:
            self.notify(warning, title="Boot warning", severity="warning")
        if not self.messages or self.messages[-1].role != "user":
            await self.send_queued()
        # else the engine answers that unanswered message first; the queue follows it.

    def _snapshot_on_disk(self, event: Booted) -> tuple[dict | None, float | None]:
        """The status bar's snapshot for what a boot found, and when it was saved."""
        if event.get("kind") != "warm":
            return None, None
        try:  # the documented file layout: <data dir>/<session>.snapshot.bin
            st = SessionFiles(self.data_dir(), self.session).snapshot.stat()
        except OSError:
            return {"status": "loaded", "bytes": event.get("snapshot_bytes")}, None
        return {"status": "saved", "bytes": st.st_size}, st.st_mtime

    async def handle_restored(self, event: Booted) -> None:
        await self._rebuild(event)
        self.banner.show_boot(event, restored=True)
        self.session_open = True
        self.status_bar.boot = event
        took = event.get("total_ms", event.get("restore_ms"))
        self.notify(f"Restored {event.get('restored_slots', 0):,} slots in {fmt.ms(took)}",
                    title="Restore")

    async def _rebuild(self, event: Booted | Undone | Rewound, trim: bool = False) -> None:
        """Show the transcript an event carries. With `trim` (an undo, a regenerate, a rewind), when
        it is what is shown less its last messages, only those bubbles go: the rest do not
        blink."""
        before = self.messages
        transcript = event.get("transcript") or []
        self.replies = ReplyChoices.from_transcript(transcript)
        self.messages = [ChatMessage(m.get("role", "?"), m.get("content", ""), m.get("id"),
                                     m.get("ts"), WITHDRAWN if m.get("withdraws")
                                     else m.get("stop"), fmt.reply_stats(m))
                         for m in transcript if not m.get("hidden")]
        last = self.messages[-1] if self.messages else None
        if last is not None and last.role == "assistant" and self.replies.label():
            last.stats = " · ".join(p for p in (last.stats, self.replies.label()) if p)
        await self._finish_current("interrupted")
        kept, gone = before[:len(self.messages)], before[len(self.messages):]
        # (A message sent from here is known by its text: it got its id in the stream.)
        if trim and gone and all(m.stop != WITHDRAWN for m in gone) and [
                (m.role, m.content) for m in kept] == [
                (m.role, m.content) for m in self.messages]:
            if self.queued_widget is not None:
                await self.queued_widget.remove()
            await self.transcript.drop_last(len(gone))
        else:
            await self.transcript.show(self.messages)
        if self.queued is not None:  # still waiting: show it again below the transcript
            self.queued_widget = await self.transcript.add_user(self.queued, via="pending")
        self.prompt.past_prompts = [m.content for m in self.messages if m.role == "user"]

    # -- turns --------------------------------------------------------------------------------
    async def handle_turn_started(self, event: TurnStarted) -> None:
        self.answering = event.get("user_event_id")
        self.banner.collapse()
        await self._reply()  # ours is shown already; else another program's message, or open

    async def handle_prefill_progress(self, event: Progress) -> None:
        reply = await self._reply()
        reply.show_reading(event.get("done", 0), event.get("total", 0))

    async def handle_token(self, event: Token) -> None:
        reply = await self._reply()
        await reply.append(event.get("text", ""))

    async def handle_end_of_turn(self, event: EndOfTurn) -> None:
        if event.get("withdraws"):  # stopped while being read: the message is taken back
            await self.transcript.withdraw(self.current)
            self.current = None
            await self._finish_current(WITHDRAWN)
            self.messages.append(ChatMessage("assistant", "", event.get("event_id"), None,
                                             WITHDRAWN))
            self.note("Stopped while reading your message: it was withdrawn "
                      "(the model did not keep it).")
            await self.send_queued()
            return
        if self.current is None or event.get("restores"):  # one brought back comes whole
            reply = await self._reply()
            await reply.append(event.get("reply", ""))
        stop = event.get("stop", "eot")
        self.replies.answered(self.answering, event.get("restores") or event.get("event_id"))
        figures = "brought back" if event.get("restores") else fmt.reply_stats(event)
        detail = " · ".join(part for part in (figures, self.replies.label()) if part)
        await self._finish_current(stop, detail, event.get("reply"))  # the note goes too
        self.messages.append(ChatMessage("assistant", event.get("reply", ""),
                                         event.get("event_id"), None, stop, detail))
        self.status_bar.tok_s = event.get("decode_tok_s")
        await self.send_queued()

    async def handle_cancelling(self, event: Event) -> None:
        if event.get("turn_active"):
            self.note("Stopping the reply…")

    async def handle_stream_event(self, event: Event) -> None:
        role, content = event.get("role", "?"), event.get("content", "")
        self.messages.append(ChatMessage(role, content, event.get("id"), event.get("ts")))
        if role == "user":
            await self.transcript.add_user(content, via="sent by another program")
        else:
            await self.transcript.add_note(f"{role} (appended): {content}")

    # -- ring and snapshots -------------------------------------------------------------------
    async def handle_ring(self, event: Event) -> None:
        self.status_bar.ring = event
        self.ring_view.update_ring(event)
        self.transcript.show_memory(event.get("turns", []),
                                    bool(event.get("older_turns_forgotten")))

    async def handle_snapshot(self, event: Event) -> None:
        self.status_bar.snapshot = event
