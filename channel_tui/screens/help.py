"""F1: every key, in one place, made from the bindings themselves (as posting does), so the
table cannot drift from what the keys do."""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ..app_keys import APP_BINDINGS
from ..widgets.message_widgets import MESSAGE_BINDINGS
from ..widgets.prompt import Prompt
from .chat import ChatScreen

# Keys of the message box, which TextArea handles rather than a binding of ours.
TYPING_KEYS = [
    ("Enter", "Send the message (queued while busy or starting)"),
    ("↑", "From an empty box: the newest message (then ↑ / ↓ between messages, Esc back)"),
]
KEY_NAMES = {"escape": "Esc", "pageup": "PageUp", "pagedown": "PageDown"}
MAX_KEYS_SHOWN = 2  # of one binding's alternatives: the rest are synonyms (Alt+Enter…)
ABOUT = (
    "Channel keeps the model's working memory (its K/V ring) across restarts: quitting saves "
    "a snapshot, and the next start restores it in milliseconds (a warm boot) instead of "
    "re-reading the whole conversation (a cold boot). Ctrl+P searches every action."
)


def key_label(keys: str) -> str:
    """'ctrl+q,ctrl+c' -> 'Ctrl+Q / Ctrl+C'."""
    def one(key: str) -> str:
        return "+".join(KEY_NAMES.get(p) or (p.capitalize() if len(p) > 1 else p.upper())
                        for p in key.split("+"))
    return " / ".join(one(k) for k in keys.split(",")[:MAX_KEYS_SHOWN])


def key_rows(*binding_lists: Iterable[Binding | tuple]) -> list[tuple[str, str]]:
    """(keys, what) for every binding that says what it does (its tooltip); bindings of one
    action are joined on one row."""
    rows: dict[str, tuple[list[str], str]] = {}
    for bindings in binding_lists:
        for binding in bindings:
            if not isinstance(binding, Binding) or not binding.tooltip:
                continue
            keys, what = rows.setdefault(binding.action, ([], binding.tooltip))
            keys.append(key_label(binding.key))
    return [(" / ".join(keys), what) for keys, what in rows.values()]


def help_rows() -> list[tuple[str, str]]:
    """Every key of the app, as F1 and the README show them."""
    return TYPING_KEYS + key_rows(Prompt.BINDINGS, MESSAGE_BINDINGS, ChatScreen.BINDINGS,
                                  APP_BINDINGS)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,f1,q", "dismiss", "Close")]

    def __init__(self) -> None:
        super().__init__()
        self.rows = help_rows()

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box", classes="dialog") as box:
            box.border_title = "Channel · keys"
            # A Rich table wraps a long description instead of cutting it (80 columns).
            table = Table(show_header=False, box=None, expand=True, padding=(0, 1),
                          row_styles=["", "on #1f1f1f"])
            table.add_column("Key", no_wrap=True, style="bold")
            table.add_column("What it does", ratio=1)
            for key, what in self.rows:
                table.add_row(key, what)
            with VerticalScroll(id="help-keys"):
                yield Static(table)
            yield Static(ABOUT, id="help-about")
            yield Static("Esc closes", classes="dialog-hint")

    def action_dismiss(self) -> None:
        self.dismiss(None)
