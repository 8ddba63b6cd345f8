"""Opening and switching sessions on the chat screen (a mixin of ChatScreen): Ctrl+N names
a new one (on the model in use, with the system prompt new sessions start from), Ctrl+O
lists them; switching stops a reply in flight, closes the session (the engine flushes its
snapshot first) and opens the other, which boots warm."""

from __future__ import annotations


class ChatSessions:
    def open_session(self, name: str, cold: bool = False, model: str | None = None) -> None:
        self.session = name
        self.fatal = False
        self.session_open = False
        self.answers.clear()  # the last session's requests: their events are ignored now
        self.status_bar.clear_session(name)
        self.load_session_settings(name)
        self.banner.show(f"Opening session {name!r}…" +
                         (" (cold: ignoring the snapshot)" if cold else ""))
        fields: dict[str, object] = {"session": name}
        if cold:
            fields["cold"] = True
        if model:  # a new session on a model from the picker; the engine records it
            fields["model"] = model
        fields.update(self.new_session_fields(name))
        self.send("open", self.open_answer(), **fields)

    async def switch_session(self, name: str | None, model: str | None = None) -> None:
        if not name or (name == self.session and model is None):
            return
        if self.busy:
            self.send("cancel", session=self.session)
            await self._finish_current("cancelled")
        if self.queued:
            self._restore_draft(self.queued)
            await self._drop_queued()
        self.send("close", session=self.session)  # flushes its snapshot before the open
        await self.transcript.show([])
        self.note("")
        self.open_session(name, model=model)

    def action_new_session(self) -> None:
        from .new_session import NewSessionScreen

        self.app.push_screen(NewSessionScreen(self.data_dir(), ask_system_prompt=True,
                                              model=self.engine.model),
                             self.switch_session)

    def action_sessions(self) -> None:
        from .sessions import SessionListScreen

        self.app.push_screen(SessionListScreen(self.data_dir(), self.session),
                             self.switch_session)
