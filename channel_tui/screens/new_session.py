"""Ctrl+N: name a new session (a free name is suggested), and see or change the system
prompt new sessions start from (kept for the next ones too: channel_tui/system_prompt.py).
Forks are named here as well, without the prompt: a fork keeps its source's."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.validation import Function
from textual.widgets import Input, Static

from ..options import valid_session_name
from ..sessions import list_sessions
from ..system_prompt import load_new_session_prompt, save_new_session_prompt


def suggest_name(data_dir: Path, base: str | None = None) -> str:
    taken = {s.name for s in list_sessions(data_dir)}
    base = base or time.strftime("chat-%Y%m%d")
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    return name


class NewSessionScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "dismiss_none", "Cancel")]

    def __init__(self, data_dir: Path, title: str = "New session",
                 suggestion_base: str | None = None, ask_system_prompt: bool = False,
                 value: str | None = None, hint: str = "Enter opens it · Esc cancels",
                 refuse: Callable[[str], str | None] | None = None,
                 model: str | None = None) -> None:
        """`value`: the name to start from (default: a free one); `refuse`: why a name
        typed cannot be taken (None: it can), shown in the dialog, which stays open;
        `model`: the model the new session will run on, said in the dialog."""
        super().__init__()
        self.data_dir = data_dir
        self.title_text = title
        self.suggestion_base = suggestion_base
        self.ask_system_prompt = ask_system_prompt
        self.value = value
        self.hint = hint
        self.refuse = refuse
        self.model = model
        self.system_prompt = load_new_session_prompt(data_dir)[0] if ask_system_prompt else ""

    def compose(self) -> ComposeResult:
        with Vertical(id="new-box", classes="dialog") as box:
            box.border_title = self.title_text
            if self.model:
                yield Static(f"Runs on {self.model} (F5 picks another model)",
                             id="new-model", markup=False)
            yield Static("Name (letters, digits, '.', '_', '-'):")
            start = self.value or suggest_name(self.data_dir, self.suggestion_base)
            yield Input(start, id="new-name",
                        validators=[Function(valid_session_name,
                                             "1-64 letters, digits, '.', '_' or '-'")])
            if self.ask_system_prompt:
                yield Static("System prompt (empty: the model's own; kept for new sessions):")
                yield Input(self.system_prompt, id="new-system", placeholder="the model's own")
            yield Static("", id="new-error")
            yield Static(self.hint, classes="dialog-hint")

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        name = self.query_one("#new-name", Input).value.strip()
        error = self.query_one("#new-error", Static)
        if not valid_session_name(name):
            error.update(
                "Use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit.")
            return
        if self.refuse is not None and (problem := self.refuse(name)) is not None:
            error.update(problem)
            return
        if self.ask_system_prompt:
            prompt = self.query_one("#new-system", Input).value
            if prompt != self.system_prompt:
                try:  # the session's first open reads it from there
                    save_new_session_prompt(self.data_dir, prompt)
                except ValueError as exc:
                    error.update(f"{exc}")
                    return
                except OSError as exc:
                    error.update(f"Cannot keep the system prompt: {exc.strerror or exc}")
                    return
        self.dismiss(name)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
