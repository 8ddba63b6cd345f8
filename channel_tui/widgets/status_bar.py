"""The status bar: model and backend, session, boot, context in use, speed and whether the
conversation is saved, in plain words (the ring's own terms are in F2's memory view).

One line: when the terminal is too narrow for every segment, the least needed go first (the
speed, the backend, the session's name, the context, the model), never half a segment. Each
field is a reactive: setting it redraws the bar.
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
        return [text for _, text in self._ranked()]

    def _ranked(self) -> list[tuple[int, Text]]:
        """(rank, segment) in display order; a segment of higher rank goes first when the
        line is too short."""
        parts = [(1, Text(self.model, style="bold"))]
        if self.backend:
            parts.append((3, Text(self.backend, style="dim")))
        if self.session:
            parts.append((2, Text.assemble(("session ", "dim"), self.session)))
        if self.engine_state:
            parts.append((0, Text(f"engine {self.engine_state}", style="bold red")))
        if self.boot is not None:
            kind = self.boot.get("kind", "?")
            took = self.boot.get("restore_ms") if kind == "warm" else self.boot.get("replay_ms")
            style = "bold green" if kind == "warm" else "bold yellow"
            parts.append((0, Text.assemble((f"{kind} boot", style), f" {fmt.ms(took)}")))
        if self.ring is not None:
            r = self.ring
            parts.append((1, Text.assemble(
                ("context ", "dim"), f"{r.get('active', 0):,}/{r.get('capacity', 0):,}",
                # The eviction policy, when it is not the default (--evict, docs/memory.md).
                *(((" · forgets by ", "dim"), r["policy"])
                  if r.get("policy") and not r.get("policy_is_default", True) else ()))))
        if self.tok_s is not None:
            parts.append((4, Text(f"{self.tok_s:.1f} tok/s")))
        snap = fmt.snapshot_text(self.snapshot, self.snapshot_saved_at)
        parts.append((0, Text(snap, style="red" if snap.startswith("save failed") else "")))
        return parts

    def _line(self, width: int) -> Text:
        ranked = self._ranked()
        # Drop order: the highest rank first, the later of equal ranks first.
        drop_order = sorted(range(len(ranked)), key=lambda i: (ranked[i][0], i), reverse=True)
        dropped: set[int] = set()
        separator = Text(SEPARATOR, style="dim")
        while True:
            line = separator.join([t for i, (_, t) in enumerate(ranked) if i not in dropped])
            if line.cell_len <= width or len(dropped) == len(ranked) \
                    or ranked[drop_order[len(dropped)]][0] == 0:
                line.truncate(width, overflow="ellipsis")
                return line
            dropped.add(drop_order[len(dropped)])

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return 1

    def render(self) -> Text:
        return self._line(max(1, self.content_size.width))
