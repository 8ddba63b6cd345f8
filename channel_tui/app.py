"""The Channel app: owns the engine child process and routes its events to the chat screen.

Quitting (Ctrl+Q, Ctrl+C, SIGTERM, SIGHUP) sends `shutdown` and waits for the engine's
synchronous flush (`bye`) before exiting. An engine that exits unexpectedly is restarted and
boots warm; one that cannot start at all (bad model, ...) is reported, not restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterable
from functools import partial

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import TextArea

from . import format as fmt
from .app_keys import APP_BINDINGS
from .engine import EngineClient
from .link import EngineLink
from .messages import (
    EngineEvent,
    EngineExited,
    EngineFatal,
    EngineLost,
    QuitRequested,
    SessionEvent,
)
from .options import AppOptions, data_dir_problem
from .preferences import load_preferences, save_preferences, session_to_open
from .screens.chat import ChatScreen
from .screens.quitting import QuittingScreen

RESTART_WINDOW_S = 60.0
QUIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class ChannelApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "Channel"
    # Every action is also in the command palette (Ctrl+P): see get_system_commands.
    BINDINGS = APP_BINDINGS

    def __init__(self, options: AppOptions | None = None) -> None:
        super().__init__()
        self.options = options or AppOptions()
        self.link = EngineLink(self.options)  # what screens get instead of the app
        self.generation = 0
        self.quitting = False
        self.fatal_error: str | None = None
        self._crashes: list[float] = []
        self.preferences, self._preference_problems = load_preferences(
            self.options.resolved_config_dir())
        self._theme_restored = False  # until then a theme change is not the person's
        self.chat = ChatScreen(self.start_session(), self.link)

    @property
    def engine(self) -> EngineClient | None:
        return self.link.client

    @property
    def hello(self) -> dict:
        return self.link.hello

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The palette lists every action that has a key, from the same bindings the help
        screen and the footer are made of."""
        yield from super().get_system_commands(screen)
        seen = set()
        for owner in (screen, self):
            for binding in owner.BINDINGS:
                if not isinstance(binding, Binding) or not binding.tooltip:
                    continue
                if binding.action in seen or binding.id in ("quit", "quit-alt"):
                    continue  # Textual's own palette has Quit
                seen.add(binding.action)
                yield SystemCommand(binding.description, binding.tooltip,
                                    partial(owner.run_action, binding.action))

    def get_default_screen(self) -> Screen:
        return self.chat

    # -- preferences (channel_tui/preferences.py) ----------------------------------------------
    def start_session(self) -> str:
        return session_to_open(self.options.session, self.options.resolved_data_dir(),
                               self.preferences)

    def restore_theme(self) -> None:
        theme = self.preferences.theme
        if theme is not None and theme not in self.available_themes:
            self._preference_problems.append(f"theme {theme!r} is not one of the app's "
                                             f"themes; using the default")
            self.preferences.theme = None
        elif theme is not None:
            self.theme = theme
        self._theme_restored = True
        for problem in self._preference_problems:
            self.notify(f"Preferences: {problem}", severity="warning", timeout=10)

    def watch_theme(self, theme: str) -> None:
        # Chosen in the palette (Ctrl+P, "Change theme"): kept for the next start.
        if self._theme_restored and theme != self.preferences.theme:
            self.preferences.theme = theme
            self.keep_preferences()

    def keep_preferences(self) -> None:
        try:
            save_preferences(self.options.resolved_config_dir(), self.preferences)
        except OSError as exc:
            self.notify(f"Cannot keep the preferences in {self.options.resolved_config_dir()}: "
                        f"{exc.strerror or exc}", severity="warning")

    def on_mount(self) -> None:
        self.restore_theme()
        loop = asyncio.get_running_loop()
        for signum in QUIT_SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signum, self._on_quit_signal, signum)
        problem = data_dir_problem(self.options.resolved_data_dir())
        if problem is not None:
            self.chat.post_message(EngineFatal(problem, "Pass --data-dir DIR. Ctrl+Q quits."))
            return
        self.start_engine()
        for note in self.options.notes:
            self.notify(note, title="Model", timeout=12)

    def _on_quit_signal(self, signum: int) -> None:
        if signum == signal.SIGHUP:
            # The terminal is gone: Textual can no longer draw (writes fail, its writer
            # thread stops and the app would hang on exit). Flush without the UI and leave.
            flushed = self.engine is None or self.engine.shutdown_blocking()
            os._exit(0 if flushed else 1)
        if self.quitting:
            # A second signal while flushing: stop now, the default way. The engine still
            # flushes by itself when our end of its stdin closes or we die.
            asyncio.get_running_loop().remove_signal_handler(signum)
            os.kill(os.getpid(), signum)
            return
        self.post_message(QuitRequested(signal.Signals(signum).name))

    async def on_unmount(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in QUIT_SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(signum)
        if self.engine is not None:
            await self.engine.close()  # EOF on stdin: the engine flushes and exits

    # -- the engine process -------------------------------------------------------------------
    def start_engine(self) -> None:
        self.generation += 1
        self.fatal_error = None
        self.link.client = EngineClient(self, self.options.engine_argv(), self.generation)
        self.run_worker(self.link.client.run(), name=f"engine-{self.generation}", group="engine",
                        exit_on_error=False)

    def on_engine_event(self, message: EngineEvent) -> None:
        if message.generation != self.generation:
            return  # from an engine we already replaced
        event = message.event
        kind = event.get("type")
        if kind in ("ready", "hello"):
            self.link.hello = event
        elif kind == "booted" and isinstance(event.get("session"), str):
            if self.preferences.remember_session(self.options.resolved_data_dir(),
                                                 event["session"]):
                self.keep_preferences()  # `channel` returns to it next time
        elif kind == "error" and event.get("fatal"):
            self.fatal_error = event.get("message", "the engine cannot start")
        elif kind == "snapshot" and isinstance(self.screen, QuittingScreen):
            self.screen.set_status(f"{event.get('session')}: {flush_text(event)}")
        self.chat.post_message(SessionEvent(event))

    def on_engine_exited(self, message: EngineExited) -> None:
        if message.generation != self.generation or self.quitting:
            return
        tail = [line for line in message.stderr_tail if line.strip()]
        if message.spawn_error is not None:
            self.chat.post_message(EngineFatal(message.spawn_error))
            return
        if self.fatal_error is not None:
            self.chat.post_message(EngineFatal(self.fatal_error, "Fix it and start Channel "
                                               "again. Ctrl+Q quits."))
            return
        description = describe_exit(message.returncode)
        if self.engine is not None and not self.engine.ready:
            # It died before `ready` without a fatal event (bad arguments, import error...):
            # restarting would fail the same way.
            self.chat.post_message(EngineFatal(f"The engine could not start ({description})",
                                               tail[-1] if tail else ""))
            return
        now = time.monotonic()
        self._crashes = [t for t in self._crashes if now - t < RESTART_WINDOW_S] + [now]
        if len(self._crashes) > self.options.max_restarts:
            self.chat.post_message(EngineFatal(
                f"The engine keeps exiting ({description}); not restarting it again",
                tail[-1] if tail else "See engine.log in the data directory."))
            return
        self.chat.post_message(EngineLost(description, tail))
        self.start_engine()

    # -- quitting -----------------------------------------------------------------------------
    async def on_quit_requested(self, message: QuitRequested) -> None:
        await self.action_quit()

    async def action_copy_or_quit(self) -> None:
        """Ctrl+C: what terminals and editors do with a selection (copy it); a quit, saving
        first as Ctrl+Q does, only when nothing is selected."""
        focused = self.focused
        selected = self.screen.get_selected_text() or (
            focused.selected_text if isinstance(focused, TextArea) else "")
        if not selected:
            await self.action_quit()
            return
        self.chat.copy_out(selected, "the selection")
        self.screen.clear_selection()

    async def action_quit(self) -> None:
        if self.quitting:
            return  # a second press while flushing is ignored
        self.quitting = True
        if self.engine is None or not self.engine.running:
            self._exit_with([])
            return
        await self.push_screen(QuittingScreen())
        self.run_worker(self._flush_and_exit(), name="flush", group="quit")

    async def _flush_and_exit(self) -> None:
        assert self.engine is not None
        said_bye = await self.engine.shutdown()
        failures = [f"{e.get('session')}: {e.get('error')}"
                    for e in self.engine.flush_events if e.get("status") == "failed"]
        if not said_bye:
            failures.append("the engine did not confirm the flush")
        self._exit_with(failures)

    def _exit_with(self, flush_failures: list[str]) -> None:
        """Exit; a failed flush or a fatal error is printed again once the screen is gone,
        where it stays readable (status 1 and 2, as the CLI's errors)."""
        if flush_failures:
            self.exit(return_code=1, message="channel: the working state was NOT saved: "
                      + "; ".join(flush_failures))
        elif self.chat.fatal_message:
            self.exit(return_code=2, message=f"channel: error: {self.chat.fatal_message}")
        else:
            self.exit()

    def action_help(self) -> None:
        from .screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())


def flush_text(event: dict) -> str:
    if event.get("status") == "saved":
        return f"saved {fmt.size(event.get('bytes'))} in {fmt.ms(event.get('ms'))}"
    if event.get("status") == "exists":
        return "unchanged since the last save"
    return fmt.snapshot_text(event, None)


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "no exit status"
    if returncode == -signal.SIGBUS:
        # What a read of a mapped page past a file's end raises: the model or a snapshot
        # the engine had mapped was cut short or replaced on disk while it ran.
        return "killed by SIGBUS: a file it had mapped (the model?) shrank on disk"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def run_app(options: AppOptions) -> int:
    """Run the app in the terminal; returns the process exit status."""
    app = ChannelApp(options)
    app.run()
    return app.return_code or 0
