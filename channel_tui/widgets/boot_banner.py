"""The banner above the conversation: loading, replay progress, then how the session booted."""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import ProgressBar, Static

from .. import format as fmt


class BootBanner(Vertical):
    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002 (Textual's name)
        super().__init__(id=id)
        self._rate_start: tuple[float, int] | None = None  # (time, tokens done) of 1st report

    def compose(self) -> ComposeResult:
        yield Static("Starting the engine…", id="boot-line", markup=False)
        yield Static("", id="boot-detail", markup=False)
        yield ProgressBar(id="boot-progress", show_eta=False)

    def on_mount(self) -> None:
        self.query_one("#boot-progress").display = False
        self.query_one("#boot-detail").display = False

    def show(self, line: str, detail: str = "", kind: str = "info") -> None:
        """A finished state: `kind` is warm, cold, info or error (it picks the colour)."""
        self._rate_start = None
        self.query_one("#boot-line", Static).update(line)
        detail_widget = self.query_one("#boot-detail", Static)
        detail_widget.update(detail)
        detail_widget.display = bool(detail)
        self.query_one("#boot-progress").display = False
        for name in ("warm", "cold", "info", "error"):
            self.set_class(name == kind, name)

    def collapse(self) -> None:
        """One line once the conversation goes on: the boot's phases were for its start."""
        self.query_one("#boot-detail").display = False

    def progress(self, line: str, done: int, total: int, tokens: bool = True) -> None:
        """Show a bar; for token counts also the rate and the time left."""
        now = time.monotonic()
        if self._rate_start is None or done < self._rate_start[1]:
            self._rate_start = (now, done)
        start_t, start_done = self._rate_start
        rate = (done - start_done) / (now - start_t) if now > start_t else None
        detail = (fmt.replay_line(done, total, rate) if tokens
                  else f"{fmt.size(done)} / {fmt.size(total)}")
        self.query_one("#boot-line", Static).update(line)
        detail_widget = self.query_one("#boot-detail", Static)
        detail_widget.update(detail)
        detail_widget.display = True
        bar = self.query_one("#boot-progress", ProgressBar)
        bar.display = True
        bar.update(total=max(total, 1), progress=done)
        for name in ("warm", "cold", "error"):
            self.remove_class(name)
        self.add_class("info")

    def show_boot(self, event: dict, restored: bool = False) -> None:
        line = fmt.boot_line(event)
        if restored:
            line = (f"Restored the last save · {event.get('restored_slots', 0):,} tokens back "
                    f"in {fmt.ms(event.get('restore_ms'))}")
            if event.get("total_ms") is not None:
                line += f" · {fmt.ms(event['total_ms'])} in all"
        kind = event.get("kind") if event.get("kind") in ("warm", "cold") else "info"
        self.show(line, fmt.phase_line(event), kind)
