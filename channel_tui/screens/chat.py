"""The chat screen: boot banner, transcript, ring view, prompt, status bar and footer.

This module holds the layout, the screen's state, the keys and sending. Engine events arrive
through `ChatEvents.handle_event` (chat_events.py); what is particular to the answers of the
screen's own requests is in chat_answers.py; undo, regenerate, edit and fork are in
chat_edits.py; going back to an earlier turn (F9) is in chat_rewind.py. The screen talks to
the engine through the EngineLink it is given, never through the app.
"""

from __future__ import annotations

from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.reactive import var
from textual.screen import Screen
from textual.widgets import Footer, Static

from ..export import ChatMessage, export_transcript
from ..link import EngineLink
from ..replies import ReplyChoices
from ..widgets.boot_banner import BootBanner
from ..widgets.message_widgets import AssistantMessage, UserMessage
from ..widgets.prompt import Prompt
from ..widgets.ring_view import RingView
from ..widgets.status_bar import StatusBar
from ..widgets.transcript import Transcript
from .chat_answers import Answer, ChatAnswers
from .chat_edits import ChatEdits
from .chat_events import ChatEvents
from .chat_navigation import ChatNavigation
from .chat_queue import ChatQueue
from .chat_rewind import REWINDING, ChatRewind
from .chat_sessions import ChatSessions
from .chat_settings import ChatSettings
from .long_message import LongMessageScreen, too_long


class ChatScreen(ChatEvents, ChatAnswers, ChatEdits, ChatRewind, ChatSettings, ChatNavigation,
                 ChatQueue, ChatSessions, Screen):
    # One line per key: the footer, the help screen (F1) and the command palette (Ctrl+P)
    # are all made from these (description: the short label; tooltip: what it does).
    BINDINGS = [
        Binding("escape", "cancel", "Stop", priority=True, id="stop",
                tooltip="Stop the reply being generated (it is kept, marked cancelled)"),
        Binding("ctrl+s", "save", "Save", priority=True, show=False, id="save",
                tooltip="Save the working state now (shows saved, unchanged or failed)"),
        Binding("f8", "restore", "Restore", priority=True, id="restore", show=False,
                tooltip="Developer: reload the last save (snapshot) now, as a restart would"),
        Binding("ctrl+g", "regenerate", "Again", priority=True, id="regenerate",
                tooltip="Regenerate the last reply (nothing is re-read)"),
        Binding("alt+left", "other_reply(-1)", "Previous reply", priority=True, show=False,
                id="previous-reply", tooltip="Bring back the reply Ctrl+G replaced"),
        Binding("alt+right", "other_reply(1)", "Next reply", priority=True, show=False,
                id="next-reply", tooltip="Step forward through the last message's replies"),
        Binding("f3", "undo", "Undo", priority=True, id="undo",
                tooltip="Undo the last turn: your message and its reply leave the ring"),
        Binding("f4", "edit_last", "Edit", priority=True, show=False, id="edit",
                tooltip="Edit and resend your last message (undone, back in the box)"),
        Binding("f9", "turns", "Turns", priority=True, show=False, id="turns",
                tooltip="Turn list: go back to an earlier turn (rewind) or fork from it"),
        Binding("ctrl+t", "copy_reply", "Copy", priority=True, id="copy",
                tooltip="Copy the last reply (↑ then c copies any message; a click, a code "
                        "block)"),
        Binding("pageup", "scroll_transcript('page_up')", "Page up", priority=True,
                show=False, id="page-up", tooltip="Scroll the conversation up a page"),
        Binding("pagedown", "scroll_transcript('page_down')", "Page down", priority=True,
                show=False, id="page-down", tooltip="Scroll the conversation down a page"),
        Binding("ctrl+home", "scroll_transcript('home')", "Top", priority=True, show=False,
                id="top", tooltip="Scroll to the start of the conversation"),
        Binding("ctrl+end", "scroll_transcript('end')", "Bottom", priority=True, show=False,
                id="bottom", tooltip="Scroll to the newest message"),
        Binding("ctrl+f", "fork", "Fork", priority=True, show=False, id="fork",
                tooltip="Fork the session: a copy of its state that goes its own way"),
        Binding("ctrl+n", "new_session", "New", priority=True, id="new", show=False,
                tooltip="New session"),
        Binding("ctrl+o", "sessions", "Sessions", priority=True, id="sessions",
                tooltip="Session list: switch to another session (it boots warm)"),
        Binding("ctrl+e", "export", "Export", priority=True, id="export", show=False,
                tooltip="Export the transcript to Markdown"),
        Binding("f7", "boot_compare", "Boots", priority=True, id="boots", show=False,
                tooltip="Developer: boot this session cold and warm, side by side (about "
                        "as long as a cold boot)"),
        Binding("f2", "toggle_ring", "Ring", priority=True, id="ring", show=False,
                tooltip="Show or hide the ring view (the model's working memory)"),
        Binding("f5", "models", "Models", priority=True, show=False, id="models",
                tooltip="Choose a model (GGUFs found on this machine) for a new session"),
        Binding("f6", "settings", "Settings", priority=True, id="settings", show=False,
                tooltip="This session's reply settings: temperature, top-p, …"),
    ]

    # The screen's state; each watcher below is the one place its widgets follow it.
    busy = var(False, init=False)  # a reply is streaming (`current`)
    session_open = var(False, init=False)  # booted: turns can be sent
    fatal = var(False, init=False)  # the engine cannot serve and will not be restarted

    def __init__(self, session: str, engine: EngineLink) -> None:
        super().__init__()
        self.session = session
        self.engine = engine
        self.messages: list[ChatMessage] = []
        # The reply being streamed: the one turn in flight. Esc needs to know there is one
        # (`cancel` names the session, not the turn), and a turn may begin without a request
        # of ours (another program's message, or open answering a message left unanswered),
        # so this cannot live in a request's answer.
        self.current: AssistantMessage | None = None
        self.answers: dict[int, Answer] = {}  # request id -> its answer (chat_answers.py)
        self.queued: str | None = None  # one message typed while busy or still booting
        self.queued_widget: UserMessage | None = None  # that message, shown as pending
        self.fatal_message: str | None = None
        self.restart_note: str | None = None  # shown after the transcript is rebuilt
        self.settings: dict[str, float | int] = {}  # the session's reply settings (F6)
        self.ring_slots: int | None = None  # the open session's ring size (`booted`)
        self.replies = ReplyChoices()  # the last message's replies (Alt+←/→)
        self.answering: str | None = None  # the message the turn in flight answers

    def compose(self) -> ComposeResult:
        # Kept for the handlers and watchers: the layout never changes, so each widget is
        # made here once instead of looked up on every event.
        self.banner = BootBanner(id="boot")
        self.transcript = Transcript(id="transcript")
        self.ring_view = RingView(id="ring")
        self.note_line = Static("", id="note", markup=False)
        self.prompt = Prompt(id="prompt")
        self.status_bar = StatusBar(id="status")
        yield self.banner
        with Horizontal(id="main"):
            yield self.transcript
            yield self.ring_view
        yield self.note_line
        yield self.prompt
        yield self.status_bar
        yield Footer()

    def on_mount(self) -> None:
        self.ring_view.display = False
        self.status_bar.session = self.session
        self.prompt.focus()

    # -- state --------------------------------------------------------------------------------
    def watch_busy(self, busy: bool) -> None:
        if not busy:  # what the note said about the reply (stopping it, the queue) is over
            self.note("")

    def watch_session_open(self, session_open: bool) -> None:
        if session_open:  # whatever the status bar said about the engine is over
            self.status_bar.engine_state = ""

    def watch_fatal(self, fatal: bool) -> None:
        self.status_bar.engine_state = "stopped" if fatal else ""

    async def _reply(self) -> AssistantMessage:
        """The reply in flight, shown first if it is not yet."""
        if self.current is None:
            self.current = await self.transcript.add_assistant()
            self.busy = True
        return self.current

    async def _finish_current(self, stop: str, detail: str = "",
                              text: str | None = None) -> None:
        if self.current is not None:
            await self.current.finish(stop, detail, text)
        self.current = None
        self.busy = False

    # -- helpers ------------------------------------------------------------------------------
    def note(self, text: str, kind: str = "info") -> None:
        self.note_line.update(text)
        self.note_line.display = bool(text)
        for name in ("info", "warning", "error"):
            self.note_line.set_class(name == kind, name)

    def send(self, kind: str, answer: Answer | None = None, **fields: object) -> int | None:
        """Write one request; its id, or None (with a note) when no engine is running.
        `answer` takes what is particular to its events (chat_answers.py)."""
        request_id = self.engine.send(kind, **fields)
        if request_id is None:
            self.note("The engine is not running; wait for it to restart.", "warning")
        elif answer is not None:
            self.answers[request_id] = answer
        return request_id

    def data_dir(self) -> Path:
        return self.engine.data_dir()

    # -- sending ------------------------------------------------------------------------------
    @on(Prompt.Submitted)
    async def send_from_prompt(self, event: Prompt.Submitted) -> None:
        text = event.text.strip()
        if not text:
            return
        if self.fatal:
            self.note("The engine is stopped (see above); your message is kept.", "warning")
            return
        if self.busy or not self.session_open or self.rewind_in_flight() == REWINDING:
            if self.queued is not None:
                self.note("A message is already queued; it goes when this reply ends "
                          "(Esc stops the reply).", "warning")
                return
            await self._queue(text)
            self.prompt.remember(text)
            self.prompt.clear()
            return
        if too_long(text, self.ring_slots):  # ask first: send anyway, or back to edit it
            async def answered(send: bool | None) -> None:
                if send and not self.busy and await self.send_turn(text):
                    self.prompt.remember(text)
                    self.prompt.clear()

            self.app.push_screen(LongMessageScreen(text, self.ring_slots or 0), answered)
            return
        if await self.send_turn(text):
            self.prompt.remember(text)
            self.prompt.clear()

    async def send_turn(self, text: str) -> bool:
        request_id = self.send("turn", self.turn_answer(), session=self.session, text=text,
                               **self.reply_fields())
        if request_id is None:
            return False
        self.messages.append(ChatMessage("user", text))
        await self.transcript.add_user(text)
        await self._reply()
        self.note("")
        return True

    # -- actions ------------------------------------------------------------------------------
    def action_cancel(self) -> None:
        if self.message_focused():  # Esc leaves the messages for the prompt
            self.prompt.focus()
        elif self.busy and self.send("cancel", session=self.session) is not None:
            self.note("Stopping the reply…")
        elif not self.busy:
            self.cancel_rewind_plan()  # F9's dry run, if one is awaited

    def action_save(self) -> None:
        if self.send("save", self.save_answer(), session=self.session) is not None:
            self.status_bar.snapshot = {"status": "saving"}

    def action_restore(self) -> None:
        if self.busy:
            self.note("Wait for the reply to end (Esc stops it), then restore.", "warning")
            return
        if self.send("restore", self.restore_answer(), session=self.session) is not None:
            self.banner.show("Restoring the last snapshot…")

    def action_export(self) -> None:
        directory = self.engine.options.export_dir or Path.cwd()
        try:
            path = export_transcript(directory, self.session, self.messages, self.engine.model)
        except OSError as exc:
            self.notify(f"Export failed: {exc.strerror or exc}", severity="error")
            return
        self.notify(f"Exported {len(self.messages)} messages to {path}", title="Export")

    def action_boot_compare(self) -> None:
        from .boot_compare import BootCompareScreen

        if self.fatal:
            return
        self.app.push_screen(BootCompareScreen(self.session, self.engine))

    def action_models(self) -> None:
        from .model_picker import model_session_flow

        model_session_flow(self)

    def action_toggle_ring(self) -> None:
        self.ring_view.display = not self.ring_view.display

