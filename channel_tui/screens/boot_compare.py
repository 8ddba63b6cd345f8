"""F7: boot the session cold (replay everything) and warm (restore the snapshot), side by
side, through the engine's `boot_compare` request; the cold boot's progress shows as it goes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import LoadingIndicator, ProgressBar, Static

from .. import format as fmt

if TYPE_CHECKING:
    from ..link import EngineLink

BAR_WIDTH = 40


class BootCompareScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q", "dismiss_none", "Close")]

    @dataclass
    class Answer(Message):
        event: dict

    def __init__(self, session: str, engine: EngineLink) -> None:
        super().__init__()
        self.session = session
        self.engine = engine
        self.request_id: int | None = None
        self.result: dict | None = None  # the boot_compare event, once it came

    def compose(self) -> ComposeResult:
        with Vertical(id="compare-box", classes="dialog") as box:
            box.border_title = f"Boot comparison · {self.session}"
            yield Static(f"Saving, then booting {self.session!r} twice in the engine: cold "
                         "(re-reading the whole conversation), then warm (from the "
                         "snapshot)…", id="compare-intro")
            yield LoadingIndicator(id="compare-loading")
            yield ProgressBar(id="compare-progress", show_eta=False)
            yield Static("", id="compare-result")
            yield Static("Esc closes", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#compare-progress").display = False
        self.request_id = self.engine.send("boot_compare", on_event=self._answer,
                                           session=self.session)
        if self.request_id is None:
            self._show_error("the engine is not running")

    def on_unmount(self) -> None:
        self.engine.forget(self.request_id)

    def _answer(self, event: dict) -> None:
        # Called by the engine client's reader; hand the event over as a message.
        self.post_message(self.Answer(event))

    def on_boot_compare_screen_answer(self, message: Answer) -> None:
        event = message.event
        if event.get("type") == "replay_progress":
            done, total = event.get("done", 0), event.get("total", 0)
            self.query_one("#compare-loading").display = False
            bar = self.query_one("#compare-progress", ProgressBar)
            bar.display = True
            bar.update(total=max(total, 1), progress=done)
            self.query_one("#compare-intro", Static).update(
                f"Cold boot: re-reading the conversation · {done:,} / {total:,} tokens")
        elif event.get("type") == "boot_compare":
            self.query_one("#compare-progress").display = False
            self.show_result(event)
        elif event.get("type") == "error":
            self._show_error(event.get("message", "unknown error"))

    def _show_error(self, message: str) -> None:
        self.query_one("#compare-loading").display = False
        self.query_one("#compare-result", Static).update(
            Text(f"The comparison failed: {message}", style="bold red"))

    def show_result(self, r: dict) -> None:
        self.result = r
        self.query_one("#compare-loading").display = False
        self.query_one("#compare-intro").display = False
        self.query_one("#compare-result", Static).update(render_comparison(r))

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


def render_comparison(r: dict) -> Group:
    table = Table.grid(padding=(0, 2))
    table.add_column(justify="left", style="dim")
    table.add_column(justify="right")
    table.add_column(justify="right")
    table.add_row("", Text("Cold boot", style="bold yellow"),
                  Text("Warm boot", style="bold green"))
    table.add_row("total", fmt.ms(r.get("cold_ms")), fmt.ms(r.get("warm_ms")))
    table.add_row("restore snapshot", "—", fmt.ms(r.get("warm_restore_ms")))
    table.add_row("replay stream", fmt.ms(r.get("cold_replay_ms")),
                  fmt.ms(r.get("warm_replay_ms")))
    table.add_row("re-read", fmt.plural(r.get("cold_tokens", 0), "token"), "—")
    table.add_row("events replayed", f"{r.get('cold_events', 0):,}", "—")
    table.add_row("slots restored", "—", f"{r.get('warm_slots', 0):,}")
    cold, warm = r.get("cold_ms") or 0.0, r.get("warm_ms") or 0.0
    longest = max(cold, warm, 1e-9)
    bars = Text()
    for label, value, style in (("cold ", cold, "yellow"), ("warm ", warm, "green")):
        bars.append(label, style="dim")
        bars.append("█" * max(1, round(BAR_WIDTH * value / longest)), style=style)
        bars.append(f" {fmt.ms(value)}\n")
    if r.get("warm_kind") != "warm":
        verdict = Text(f"No warm boot to compare: {r.get('warm_reason', 'no snapshot')}.",
                       style="bold red")
    else:
        verdict = Text(f"Warm boot is {r.get('ratio') or 0:,.1f}× faster than cold.",
                       style="bold green")
    return Group(table, Text(""), bars, verdict)
