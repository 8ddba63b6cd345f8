"""F6: the session's reply settings (temperature, top-p, min-p, repetition penalty, max
tokens) and its system prompt. Each input is checked as it is typed, with the engine's
ranges, and says what is wrong on one line under it; an empty input is the model's default.
Enter saves them all (the chat screen writes them beside the session and sends them with
every turn); Esc cancels. A changed system prompt goes on to system_prompt.py's choice.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from ..settings import FIELDS, SettingField, Settings, parse_field
from ..system_prompt import system_prompt_problem


@dataclass(frozen=True)
class SettingsChoice:
    settings: Settings
    system_prompt: str  # as typed: the session's own unless the person changed it


class SettingsScreen(ModalScreen[SettingsChoice | None]):
    BINDINGS = [
        Binding("escape", "dismiss_none", "Cancel"),
        Binding("ctrl+r", "defaults", "Model defaults"),
    ]

    def __init__(self, session: str, settings: Settings, system_prompt: str = "") -> None:
        super().__init__()
        self.session = session
        self.settings = dict(settings)
        self.system_prompt = system_prompt

    def compose(self) -> ComposeResult:
        with Vertical(id="settings-box", classes="dialog") as box:
            box.border_title = f"Settings · session {self.session}"
            yield Static("Empty: the model's default (its GGUF's recommended value, else "
                         "llama.cpp's).", id="settings-about")
            for spec in FIELDS:
                value = self.settings.get(spec.name)
                with Horizontal(classes="settings-row"):
                    yield Label(spec.label, classes="settings-label")
                    yield Input("" if value is None else f"{value:g}", id=f"set-{spec.name}",
                                placeholder=f"default · {spec.hint}", compact=True)
                yield Static("", id=f"set-{spec.name}-error", classes="settings-error")
            with Horizontal(classes="settings-row"):
                yield Label("System prompt", classes="settings-label")
                yield Input(self.system_prompt, id="set-system", compact=True,
                            placeholder="the model's own · a change goes to a fork or to "
                                        "new sessions")
            yield Static("", id="set-system-error", classes="settings-error")
            yield Static("Enter saves · Ctrl+R clears all (model defaults) · Esc cancels",
                         classes="dialog-hint")

    def on_mount(self) -> None:
        for spec in FIELDS:
            self._error_line(spec).display = False
        self.query_one("#set-system-error", Static).display = False

    def _input(self, spec: SettingField) -> Input:
        return self.query_one(f"#set-{spec.name}", Input)

    def _error_line(self, spec: SettingField) -> Static:
        return self.query_one(f"#set-{spec.name}-error", Static)

    def _check(self, spec: SettingField) -> tuple[float | int | None, str | None]:
        value, problem = parse_field(spec, self._input(spec).value)
        line = self._error_line(spec)
        line.update(problem or "")
        line.display = problem is not None
        self._input(spec).set_class(problem is not None, "-invalid")
        return value, problem

    def _check_system(self) -> str | None:
        field = self.query_one("#set-system", Input)
        problem = system_prompt_problem(field.value)
        line = self.query_one("#set-system-error", Static)
        line.update(problem or "")
        line.display = problem is not None
        field.set_class(problem is not None, "-invalid")
        return problem

    @on(Input.Changed)
    def changed(self, event: Input.Changed) -> None:
        spec = next((f for f in FIELDS if event.input.id == f"set-{f.name}"), None)
        if spec is not None:
            self._check(spec)
        elif event.input.id == "set-system":
            self._check_system()

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        settings: Settings = {}
        first_bad: Input | None = None
        for spec in FIELDS:
            value, problem = self._check(spec)
            if problem is not None and first_bad is None:
                first_bad = self._input(spec)
            if value is not None:
                settings[spec.name] = value
        if self._check_system() is not None and first_bad is None:
            first_bad = self.query_one("#set-system", Input)
        if first_bad is not None:
            first_bad.focus()
            return
        self.dismiss(SettingsChoice(settings, self.query_one("#set-system", Input).value))

    def action_defaults(self) -> None:
        """The reply settings back to the model's; the system prompt is not one of them."""
        for spec in FIELDS:
            self._input(spec).value = ""

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
