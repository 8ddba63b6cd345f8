"""The session's reply settings on the chat screen (a mixin of ChatScreen): read when a
session opens, edited on the settings screen (F6), saved beside the session and sent with
every `turn` and `regenerate` (channel_tui/settings.py).

The system prompt is edited there too, but it is pinned at the head of the ring: a changed
one goes to a fork of the session or to new sessions (screens/system_prompt.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..settings import Settings, load_settings, request_fields, save_settings, summary
from ..system_prompt import is_new_session, load_new_session_prompt, save_new_session_prompt

if TYPE_CHECKING:
    from ..export import ChatMessage
    from ..link import EngineLink
    from .settings import SettingsChoice


class ChatSettings:
    session: str
    engine: EngineLink
    settings: Settings  # the open session's; set by ChatScreen
    messages: list[ChatMessage]

    def load_session_settings(self, name: str) -> None:
        """Read session `name`'s settings (none saved: the defaults); say what was wrong."""
        self.settings, problems = load_settings(self.data_dir(), name)
        for problem in problems:
            self.notify(f"Session settings: {problem}", title="Settings", severity="warning")

    def reply_fields(self) -> dict:
        """The settings fields of a `turn` or `regenerate`: the app's options (command line),
        overlaid with the session's."""
        options = self.engine.options
        return request_fields(self.settings, options.sampling, options.max_tokens)

    def new_session_fields(self, name: str) -> dict:
        """What an `open` of session `name` carries: for a new session, the system prompt
        new sessions start from (none: the template's own)."""
        if not is_new_session(self.data_dir(), name):
            return {}
        prompt, problem = load_new_session_prompt(self.data_dir())
        if problem:
            self.notify(f"System prompt for new sessions: {problem}", title="Settings",
                        severity="warning")
        return {"system": prompt} if prompt.strip() else {}

    def system_prompt(self) -> str:
        """The open session's system prompt, as its transcript shows it ('' if none)."""
        first = self.messages[0] if self.messages else None
        return first.content if first is not None and first.role == "system" else ""

    def action_settings(self) -> None:
        from .settings import SettingsScreen

        self.app.push_screen(SettingsScreen(self.session, self.settings, self.system_prompt()),
                             self._settings_chosen)

    def _settings_chosen(self, choice: SettingsChoice | None) -> None:
        if choice is None:
            return
        self._save_reply_settings(choice.settings)
        prompt = choice.system_prompt
        if prompt.strip() and prompt != self.system_prompt():
            self._system_prompt_changed(prompt)

    def _system_prompt_changed(self, prompt: str) -> None:
        from .new_session import NewSessionScreen
        from .system_prompt import FORK, NEW_SESSIONS, SystemPromptScreen

        session = self.session

        def fork_as(name: str | None) -> None:
            if name:  # `forked` switches to it (chat_edits.py); it replays, cold
                self.send("fork", session=session, new=name, system=prompt)

        def chosen(where: str | None) -> None:
            if where == FORK:
                self.app.push_screen(NewSessionScreen(
                    self.data_dir(), title="Fork with the new system prompt",
                    suggestion_base=f"{session}-fork"), fork_as)
            elif where == NEW_SESSIONS:
                try:
                    save_new_session_prompt(self.data_dir(), prompt)
                except (OSError, ValueError) as exc:
                    self.notify(f"System prompt not kept: {_why(exc)}", title="Settings",
                                severity="error")
                    return
                self.notify("New sessions start from this system prompt (Ctrl+N)",
                            title="Settings")

        messages = sum(m.role in ("user", "assistant") for m in self.messages)
        self.app.push_screen(SystemPromptScreen(session, prompt, messages), chosen)

    def _save_reply_settings(self, settings: Settings) -> None:
        try:
            save_settings(self.data_dir(), self.session, settings)
        except OSError as exc:  # still used for this run; said so
            self.notify(f"Settings not saved: {exc.strerror or exc}; they apply until you "
                        "leave the session", title="Settings", severity="error")
        self.settings = settings
        self.notify(f"Replies in {self.session!r}: {summary(settings)}", title="Settings")


def _why(exc: OSError | ValueError) -> str:
    return str(exc.strerror or exc) if isinstance(exc, OSError) else str(exc)
