"""The ring as a heat map: one half-block per slot (or per bucket of slots), coloured by kind
(anchor, recent window, older, free) and by salience decile.

The engine sends `ring.cells`, one character per slot: '.' free, 'A'-'J' anchor, 'a'-'j'
recent window, '0'-'9' other live slot; the letter or digit is the salience decile.
"""

from __future__ import annotations

import math

from rich.text import Text
from textual.widget import Widget

LEGEND_LINES = 3


def _ramp(start: tuple[int, int, int], end: tuple[int, int, int]) -> list[str]:
    steps = []
    for i in range(10):
        t = i / 9
        r, g, b = (round(s + (e - s) * t) for s, e in zip(start, end))
        steps.append(f"#{r:02x}{g:02x}{b:02x}")
    return steps


ANCHOR = _ramp((0x1b, 0x3a, 0x6b), (0x8c, 0xc4, 0xff))
RECENT = _ramp((0x14, 0x4d, 0x3a), (0x7c, 0xf0, 0xb0))
HEAT = ["#2b1a3d", "#431d5c", "#5e2069", "#7b2a6b", "#983566",
        "#b4455a", "#cd5b47", "#e3762f", "#f29a1b", "#f9c623"]
FREE = "#303030"


def cell_colour(cell: str) -> str:
    if "A" <= cell <= "J":
        return ANCHOR[ord(cell) - ord("A")]
    if "a" <= cell <= "j":
        return RECENT[ord(cell) - ord("a")]
    if cell.isdigit():
        return HEAT[int(cell)]
    return FREE


def bucket(cells: str) -> str:
    """One character standing for several slots: anchors first, then recent, then the
    hottest older slot; free only when every slot in it is free."""
    for low, high in (("A", "J"), ("a", "j"), ("0", "9")):
        hits = [c for c in cells if low <= c <= high]
        if hits:
            return max(hits)
    return "."


def downsample(cells: str, per_cell: int) -> str:
    if per_cell <= 1:
        return cells
    return "".join(bucket(cells[i:i + per_cell]) for i in range(0, len(cells), per_cell))


class RingView(Widget):
    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002 (Textual's name)
        super().__init__(id=id)
        self.border_title = "Ring"
        self.ring: dict | None = None

    def update_ring(self, ring: dict) -> None:
        self.ring = ring
        self._update_scale()
        self.refresh()

    def on_resize(self) -> None:
        self._update_scale()

    def _update_scale(self) -> None:
        per_cell = self._per_cell()
        self.border_subtitle = f"half-cell = {per_cell} slot" + ("s" if per_cell > 1 else "")

    def _per_cell(self) -> int:
        """Slots per half cell: two per character cell, bucketed when the ring won't fit."""
        cells = (self.ring or {}).get("cells", "")
        width, map_rows = self.content_size.width, self.content_size.height - LEGEND_LINES
        if not cells or width < 1 or map_rows < 1:
            return 1
        return max(1, math.ceil(len(cells) / (width * 2 * map_rows)))

    def render(self) -> Text:
        width, height = self.content_size.width, self.content_size.height
        if self.ring is None:
            return Text("waiting for the engine…", style="dim")
        if width < 4 or height <= LEGEND_LINES:
            return Text("(too small)", style="dim")
        cells = self.ring.get("cells", "")
        per_cell = self._per_cell()
        drawn = downsample(cells, per_cell)
        text = Text()
        rows = math.ceil(len(drawn) / width) if drawn else 0
        for char_row in range(math.ceil(rows / 2)):
            top = drawn[2 * char_row * width:(2 * char_row + 1) * width]
            bottom = drawn[(2 * char_row + 1) * width:(2 * char_row + 2) * width]
            for i, cell in enumerate(top):
                below = bottom[i] if i < len(bottom) else None
                style = cell_colour(cell) + (f" on {cell_colour(below)}" if below else "")
                text.append("▀", style=style)
            text.append("\n")
        text.append_text(self._legend(per_cell))
        return text

    def _legend(self, per_cell: int) -> Text:
        r = self.ring or {}
        legend = Text()
        for label, colour in (("anchor", ANCHOR[7]), ("recent", RECENT[7]),
                              ("older", HEAT[7]), ("free", FREE)):
            legend.append("■", style=colour)
            legend.append(f" {label} ")
        legend.append("\n")
        legend.append(f"{r.get('active', 0):,}/{r.get('capacity', 0):,} live · "
                      f"{r.get('anchors', 0):,} anchors", style="dim")
        legend.append("\n")
        legend.append(f"evicted {r.get('evicted', 0):,} · rebases {r.get('rebases', 0)}",
                      style="dim")
        return legend
