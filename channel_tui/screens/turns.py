"""F9: the session's turns, to go back to an earlier one (rewind) or fork from it.

A turn is a user message and its reply, numbered as the engine numbers them
(engine/session/rewind.py): 1..N in the order the ring holds them, turn 0 the system prompt
alone. The list is made from the transcript the chat screen already holds (hidden messages
are not in it; a withdrawn message, stopped while it was read, was never a turn). The
current turn, the last, is marked and cannot be chosen: there is nothing after it to take
back.

Choosing a turn asks the engine what a rewind would do (`rewind` with `dry_run`), and
RewindScreen shows that (a warm restore from a kept state, or a re-read of the
conversation) before anything changes: Rewind, Fork from here, or Cancel. The flow is
chat_rewind.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, OptionList, Static
from textual.widgets.option_list import Option

from ..export import ChatMessage
from ..widgets.message_widgets import WITHDRAWN

SYSTEM_ONLY = "(system prompt only)"
LIST_HINT = "Enter: go back to the highlighted turn (asks first) · Esc closes"
REWIND, FORK = "rewind", "fork"
FIRST_LINE = 60  # characters of a message's first line shown in the list


@dataclass(frozen=True)
class Turn:
    number: int  # 0: the system prompt alone
    text: str  # the user message's first line (SYSTEM_ONLY for turn 0)


def turns_of(messages: list[ChatMessage]) -> list[Turn]:
    """Turn 0, then one per user message the ring took in, oldest first."""
    turns = [Turn(0, SYSTEM_ONLY)]
    for i, message in enumerate(messages):
        if message.role != "user":
            continue
        following = messages[i + 1] if i + 1 < len(messages) else None
        if following is not None and following.stop == WITHDRAWN:
            continue  # taken back out while being read: the engine counts no turn
        turns.append(Turn(len(turns), first_line(message.content)))
    return turns


def first_line(text: str, limit: int = FIRST_LINE) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


class TurnsScreen(ModalScreen[int | None]):
    """Dismissed with the chosen turn's number, or None (Esc)."""

    CSS_PATH = "turns.tcss"
    BINDINGS = [Binding("escape", "close", "Close")]

    def __init__(self, turns: list[Turn]) -> None:
        super().__init__()
        self.turns = turns

    def compose(self) -> ComposeResult:
        current = len(self.turns) - 1
        options = [Option(self._label(turn, turn.number == current), id=str(turn.number),
                          disabled=turn.number == current) for turn in self.turns]
        with Vertical(id="turns-box", classes="dialog") as box:
            box.border_title = "Turns"
            box.border_subtitle = f"now at turn {current}"
            yield OptionList(*options, id="turns-list")
            yield Static(LIST_HINT, classes="dialog-hint")

    @staticmethod
    def _label(turn: Turn, current: bool) -> Content:
        label = Content(f"{turn.number:>3}  {turn.text}")
        if current:
            label = label + Content.styled("  ● now", "italic")
        return label

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.highlighted = max(0, len(self.turns) - 2)  # the newest that can be chosen
        options.scroll_end(animate=False)
        options.focus()

    @on(OptionList.OptionSelected)
    def chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(int(event.option.id or 0))

    def action_close(self) -> None:
        self.dismiss(None)


class RewindScreen(ModalScreen[str | None]):
    """What a rewind to `turn` would do (the engine's dry run), then REWIND, FORK or None."""

    CSS_PATH = "turns.tcss"
    BINDINGS = [
        Binding("r,enter", f"choose('{REWIND}')", "Rewind"),
        Binding("f", f"choose('{FORK}')", "Fork from here"),
        Binding("escape,n", "choose('')", "Cancel"),
    ]

    def __init__(self, turn: Turn, plan_text: str, taken_back: int) -> None:
        super().__init__()
        self.turn = turn
        self.plan_text = plan_text[:1].upper() + plan_text[1:]
        self.taken_back = taken_back

    def compose(self) -> ComposeResult:
        turn = self.turn
        where = "the system prompt alone" if turn.number == 0 else f"“{turn.text}”"
        with Vertical(id="rewind-box", classes="dialog") as box:
            box.border_title = f"Back to turn {turn.number}"
            yield Static(f"Go back to turn {turn.number}, {where}?", id="rewind-question",
                         markup=False)
            yield Static(self.plan_text, id="rewind-plan", markup=False)
            yield Static(f"Rewind takes back the {self.taken_back} message(s) after it (the "
                         "stream keeps them, marked retracted); a fork leaves this session "
                         "as it is and continues from that turn under a new name.",
                         classes="dialog-hint", markup=False)
            with Horizontal(id="rewind-buttons"):
                yield Button("Rewind (R)", id=REWIND, variant="primary")
                yield Button("Fork from here (F)", id=FORK)
                yield Button("Cancel (Esc)", id="cancel")

    def on_mount(self) -> None:
        self.query_one(f"#{REWIND}", Button).focus()

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.action_choose(event.button.id if event.button.id in (REWIND, FORK) else "")

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice or None)
