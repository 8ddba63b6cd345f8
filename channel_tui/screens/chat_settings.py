"""The session's reply settings on the chat screen (a mixin of ChatScreen): read when a
session opens, edited on the settings screen (F6), saved beside the session and sent with
every `turn` and `regenerate` (channel_tui/settings.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..settings import Settings, load_settings, request_fields, save_settings, summary

if TYPE_CHECKING:
    from ..link import EngineLink


class ChatSettings:
    session: str
    engine: EngineLink
    settings: Settings  # the open session's; set by ChatScreen

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

    def action_settings(self) -> None:
        from .settings import SettingsScreen

        self.app.push_screen(SettingsScreen(self.session, self.settings),
                             self._settings_chosen)

    def _settings_chosen(self, settings: Settings | None) -> None:
        if settings is None:
            return
        try:
            save_settings(self.data_dir(), self.session, settings)
        except OSError as exc:  # still used for this run; said so
            self.notify(f"Settings not saved: {exc.strerror or exc}; they apply until you "
                        "leave the session", title="Settings", severity="error")
        self.settings = settings
        self.notify(f"Replies in {self.session!r}: {summary(settings)}", title="Settings")
