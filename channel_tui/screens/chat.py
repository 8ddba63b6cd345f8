"""The chat screen: boot banner, transcript, ring view, prompt, status bar and footer.

Engine events arrive through `ChatEvents.handle_event` (screens/chat_events.py); this module
holds the layout, the key actions and sending.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Static

from ..export import ChatMessage, export_transcript
from ..widgets.boot_banner import BootBanner
from ..widgets.prompt import Prompt
from ..widgets.ring_view import RingView
from ..widgets.status_bar import StatusBar
from ..widgets.transcript import AssistantMessage, Transcript
from .chat_events import ChatEvents

if TYPE_CHECKING:
    from ..app import ChannelApp


class ChatScreen(ChatEvents, Screen):
    BINDINGS = [
        Binding("escape", "cancel", "Stop", priority=True),
        Binding("ctrl+s", "save", "Save", priority=True),
        Binding("ctrl+r", "restore", "Restore", priority=True),
        Binding("ctrl+n", "new_session", "New", priority=True),
        Binding("ctrl+o", "sessions", "Sessions", priority=True),
        Binding("ctrl+e", "export", "Export", priority=True),
        Binding("ctrl+b", "boot_compare", "Boots", priority=True),
        Binding("f2", "toggle_ring", "Ring", priority=True),
        Binding("f3", "models", "Models", priority=True, id="models",
                tooltip="Choose a model and start a new session on it"),
    ]

    def __init__(self, session: str) -> None:
        super().__init__()
        self.session = session
        self.messages: list[ChatMessage] = []
        self.current: AssistantMessage | None = None  # the reply being streamed
        self.current_req: int | None = None
        self.queued: str | None = None  # one message typed while a reply streamed
        self.open_req: int | None = None
        self.save_req: int | None = None
        self.restore_req: int | None = None
        self.fatal = False
        self.fatal_message: str | None = None
        self.restart_note: str | None = None  # shown after the transcript is rebuilt

    @property
    def channel(self) -> ChannelApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield BootBanner(id="boot")
        with Horizontal(id="main"):
            yield Transcript(id="transcript")
            yield RingView(id="ring")
        yield Static("", id="note", markup=False)
        yield Prompt(id="prompt")
        yield StatusBar(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(RingView).display = False
        self.query_one(StatusBar).update_fields(session=self.session)
        self.query_one(Prompt).focus()

    # -- helpers ------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self.current is not None

    def note(self, text: str, kind: str = "info") -> None:
        label = self.query_one("#note", Static)
        label.update(text)
        label.display = bool(text)
        for name in ("info", "warning", "error"):
            label.set_class(name == kind, name)

    def send(self, kind: str, **fields: object) -> int | None:
        engine = self.channel.engine
        request_id = engine.send(kind, **fields) if engine is not None else None
        if request_id is None:
            self.note("The engine is not running; wait for it to restart.", "warning")
        return request_id

    def data_dir(self) -> Path:
        hello = self.channel.hello
        return Path(hello["data_dir"]) if hello.get("data_dir") else \
            self.channel.options.resolved_data_dir()

    # -- sessions -----------------------------------------------------------------------------
    def open_session(self, name: str, cold: bool = False, model: str | None = None) -> None:
        self.session = name
        self.fatal = False
        self.query_one(StatusBar).update_fields(session=name, boot=None, ring=None,
                                                snapshot=None, tok_s=None, engine_state="")
        self.query_one(BootBanner).show(f"Opening session {name!r}…" +
                                        (" (cold: ignoring the snapshot)" if cold else ""))
        fields: dict[str, object] = {"session": name}
        if cold:
            fields["cold"] = True
        if model:  # a new session on a model from the picker; the engine records it
            fields["model"] = model
        self.open_req = self.send("open", **fields)

    async def switch_session(self, name: str | None, model: str | None = None) -> None:
        if not name or (name == self.session and model is None):
            return
        if self.busy:
            self.send("cancel", session=self.session)
            await self._finish_current("cancelled")
        if self.queued:
            self._restore_draft(self.queued)
            self.queued = None
        self.send("close", session=self.session)  # flushes its snapshot before the open
        await self.query_one(Transcript).show([])
        self.note("")
        self.open_session(name, model=model)

    def _restore_draft(self, text: str) -> None:
        prompt = self.query_one(Prompt)
        if not prompt.text.strip():
            prompt.load_text(text)

    # -- sending ------------------------------------------------------------------------------
    @on(Prompt.Submitted)
    async def send_from_prompt(self, event: Prompt.Submitted) -> None:
        text = event.text.strip()
        if not text:
            return
        prompt = self.query_one(Prompt)
        if self.fatal:
            self.note("The engine is stopped (see above); your message is kept.", "warning")
            return
        if self.channel.engine is None or not self.channel.engine.ready:
            self.note("The engine is still starting; your message is kept.", "warning")
            return
        if self.busy:
            if self.queued is not None:
                self.note("A message is already queued; it goes when this reply ends "
                          "(Esc stops the reply).", "warning")
                return
            self.queued = text
            prompt.remember(text)
            prompt.clear()
            self.note(f"Queued: {_short(text)} · sends when the reply ends · Esc stops it")
            return
        if await self.send_turn(text):
            prompt.remember(text)
            prompt.clear()

    async def send_turn(self, text: str) -> bool:
        options = self.channel.options
        request_id = self.send("turn", session=self.session, text=text,
                               max_tokens=options.max_tokens, **options.sampling)
        if request_id is None:
            return False
        self.messages.append(ChatMessage("user", text))
        transcript = self.query_one(Transcript)
        await transcript.add_user(text)
        self.current, self.current_req = await transcript.add_assistant(), request_id
        self.note("")
        return True

    async def send_queued(self) -> None:
        if self.queued is not None and not self.busy and not self.fatal:
            text, self.queued = self.queued, None
            if not await self.send_turn(text):
                self.queued = text

    async def _finish_current(self, stop: str, detail: str = "") -> None:
        if self.current is not None:
            await self.current.finish(stop, detail)
        self.current, self.current_req = None, None

    # -- actions ------------------------------------------------------------------------------
    def action_cancel(self) -> None:
        if self.busy and self.send("cancel", session=self.session) is not None:
            self.note("Stopping the reply…")

    def action_save(self) -> None:
        request_id = self.send("save", session=self.session)
        if request_id is not None:
            self.save_req = request_id
            self.query_one(StatusBar).update_fields(snapshot={"status": "saving"})

    def action_restore(self) -> None:
        if self.busy:
            self.note("Wait for the reply to end (Esc stops it), then restore.", "warning")
            return
        request_id = self.send("restore", session=self.session)
        if request_id is not None:
            self.restore_req = request_id
            self.query_one(BootBanner).show("Restoring the last snapshot…")

    def action_new_session(self) -> None:
        from .new_session import NewSessionScreen

        self.app.push_screen(NewSessionScreen(self.data_dir()), self.switch_session)

    def action_sessions(self) -> None:
        from .sessions import SessionListScreen

        self.app.push_screen(SessionListScreen(self.data_dir(), self.session),
                             self.switch_session)

    def action_export(self) -> None:
        directory = self.channel.options.export_dir or Path.cwd()
        try:
            path = export_transcript(directory, self.session, self.messages,
                                     self.channel.hello.get("model"))
        except OSError as exc:
            self.notify(f"Export failed: {exc.strerror or exc}", severity="error")
            return
        self.notify(f"Exported {len(self.messages)} messages to {path}", title="Export")

    def action_boot_compare(self) -> None:
        from .boot_compare import BootCompareScreen

        if self.fatal:
            return
        self.app.push_screen(BootCompareScreen(self.session))

    def action_models(self) -> None:
        from .model_picker import model_session_flow

        model_session_flow(self, self.data_dir())

    def action_toggle_ring(self) -> None:
        ring = self.query_one(RingView)
        ring.display = not ring.display


def _short(text: str, limit: int = 40) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 1] + "…"
