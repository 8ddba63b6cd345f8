"""The status bar: model and backend, boot, ring occupancy, speed and snapshot state.

Segments are laid out greedily; on a narrow terminal the bar grows to two lines instead of
cutting a segment in half. Each field is a reactive: setting it redraws the bar.
"""

from __future__ import annotations

import time

from rich.text import Text
from textual.geometry import Size
from textual.reactive import reactive
from textual.widget import Widget

from .. import format as fmt

SEPARATOR = " │ "


class StatusBar(Widget):
    # Dicts are replaced, never changed in place; always_update redraws even for an equal one.
    model: reactive[str] = reactive("starting engine…", layout=True)
    backend: reactive[str] = reactive("", layout=True)
    session: reactive[str] = reactive("", layout=True)
    engine_state: reactive[str] = reactive("", layout=True)  # "", "restarting…", "stopped"
    boot: reactive[dict | None] = reactive(None, layout=True, always_update=True)
    ring: reactive[dict | None] = reactive(None, layout=True, always_update=True)
    tok_s: reactive[float | None] = reactive(None, layout=True)
    snapshot: reactive[dict | None] = reactive(None, layout=True, always_update=True)
    snapshot_saved_at: reactive[float | None] = reactive(None, layout=True)

    def on_mount(self) -> None:
        self.set_interval(1.0, self._tick)  # "saved 12 s ago" keeps counting

    def _tick(self) -> None:
        if self.snapshot is not None and self.snapshot.get("status") == "saved":
            self.refresh(layout=True)

    def watch_snapshot(self, snapshot: dict | None) -> None:
        if isinstance(snapshot, dict) and snapshot.get("status") == "saved":
            self.snapshot_saved_at = time.time()

    def clear_session(self, session: str) -> None:
        """A session is being opened: forget what was shown for the last one."""
        self.session = session
        self.boot = self.ring = self.snapshot = None
        self.tok_s = None
        self.engine_state = ""

    def segments(self) -> list[Text]:
        parts = [Text.assemble((self.model, "bold"), (f" · {self.backend}" if self.backend
                                                       else "", "dim"))]
        if self.session:
            parts.append(Text.assemble(("session ", "dim"), self.session))
        if self.engine_state:
            parts.append(Text(f"engine {self.engine_state}", style="bold red"))
        if self.boot is not None:
            kind = self.boot.get("kind", "?")
            took = self.boot.get("restore_ms") if kind == "warm" else self.boot.get("replay_ms")
            style = "bold green" if kind == "warm" else "bold yellow"
            parts.append(Text.assemble((kind, style), f" boot {fmt.ms(took)}"))
        if self.ring is not None:
            r = self.ring
            parts.append(Text.assemble(
                ("ring ", "dim"), f"{r.get('active', 0):,}/{r.get('capacity', 0):,}",
                ("  anchors ", "dim"), f"{r.get('anchors', 0):,}",
                ("  clock ", "dim"), f"{r.get('clock', 0):,}",
                # The eviction policy, when it is not the default (--evict, docs/memory.md).
                *((("  evicts by ", "dim"), r["policy"])
                  if r.get("policy") and not r.get("policy_is_default", True) else ())))
        if self.tok_s is not None:
            parts.append(Text(f"{self.tok_s:.1f} tok/s"))
        snap = fmt.snapshot_text(self.snapshot, self.snapshot_saved_at)
        snap_style = "red" if snap.startswith("failed") else ""
        parts.append(Text.assemble(("snapshot ", "dim"), (snap, snap_style)))
        return parts

    def _lines(self, width: int) -> list[Text]:
        lines: list[Text] = []
        current = Text()
        for part in self.segments():
            if current and current.cell_len + len(SEPARATOR) + part.cell_len > width:
                lines.append(current)
                current = Text()
            if current:
                current.append(SEPARATOR, style="dim")
            current.append_text(part)
        lines.append(current)
        return lines

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._lines(max(1, width)))

    def render(self) -> Text:
        return Text("\n").join(self._lines(max(1, self.content_size.width)))
