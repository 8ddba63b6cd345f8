"""The ring as a heat map: one half-block per slot (or per bucket of slots), coloured by kind
(anchor, recent window, older, free) and by salience decile.

The engine sends `ring.cells`, one character per slot: '.' free, 'A'-'J' anchor, 'a'-'j'
recent window, '0'-'9' other live slot; the letter or digit is the salience decile. The slot
where each turn's oldest kept token sits (`ring.turn_slots`) is drawn white, so the map shows
which turns still have slots in the ring; the legend counts whole, partly and wholly
forgotten turns (`ring.turns`).
"""

from __future__ import annotations

import math

from rich.text import Text
from textual.widget import Widget


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
TURN_START = "#f4f4f4"


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
        self.border_title = "Memory (the K/V ring)"
        self.ring: dict | None = None

    def update_ring(self, ring: dict) -> None:
        self.ring = ring
        self._update_scale()
        self.refresh()

    def on_resize(self) -> None:
        self._update_scale()

    def _update_scale(self) -> None:
        per_cell = self._per_cell()
        self.border_subtitle = f"each half-cell: {per_cell} token" + ("s" if per_cell > 1
                                                                         else "")

    def _per_cell(self) -> int:
        """Slots per half cell: two per character cell, bucketed when the ring won't fit."""
        cells = (self.ring or {}).get("cells", "")
        width = self.content_size.width
        map_rows = self.content_size.height - self._legend_rows(width)
        if not cells or width < 1 or map_rows < 1:
            return 1
        return max(1, math.ceil(len(cells) / (width * 2 * map_rows)))

    def render(self) -> Text:
        width, height = self.content_size.width, self.content_size.height
        if self.ring is None:
            return Text("waiting for the engine…", style="dim")
        if width < 4 or height <= self._legend_rows(width):
            return Text("(too small)", style="dim")
        cells = self.ring.get("cells", "")
        per_cell = self._per_cell()
        drawn = downsample(cells, per_cell)
        starts = {slot // per_cell for slot in self.ring.get("turn_slots", [])}

        def colour(index: int, cell: str) -> str:
            return TURN_START if index in starts else cell_colour(cell)

        text = Text()
        rows = math.ceil(len(drawn) / width) if drawn else 0
        for char_row in range(math.ceil(rows / 2)):
            top = drawn[2 * char_row * width:(2 * char_row + 1) * width]
            bottom = drawn[(2 * char_row + 1) * width:(2 * char_row + 2) * width]
            first = 2 * char_row * width
            for i, cell in enumerate(top):
                below = bottom[i] if i < len(bottom) else None
                style = colour(first + i, cell) + (
                    f" on {colour(first + width + i, below)}" if below else "")
                text.append("▀", style=style)
            text.append("\n")
        text.append_text(self._legend(per_cell))
        return text

    def _legend_rows(self, width: int) -> int:
        """The rows the legend takes at `width`, its lines wrapped."""
        lines = self._legend(1).plain.split("\n")
        return sum(max(1, math.ceil(len(line) / max(1, width))) for line in lines)

    def _legend(self, per_cell: int) -> Text:
        r = self.ring or {}
        legend = Text()
        # The engine's words, explained: anchors are the pinned system prompt, slots tokens.
        for label, colour in (("system prompt", ANCHOR[7]), ("recent", RECENT[7]),
                              ("older (brighter: more attended)", HEAT[7]), ("free", FREE),
                              ("turn start", TURN_START)):
            legend.append("■", style=colour)
            legend.append(f" {label} ")
        legend.append("\n")
        legend.append(f"{r.get('active', 0):,} of {r.get('capacity', 0):,} tokens · "
                      f"{r.get('anchors', 0):,} pinned (anchors)", style="dim")
        legend.append("\n")
        legend.append(f"{r.get('evicted', 0):,} forgotten · {r.get('rebases', 0)} rebases",
                      style="dim")
        legend.append("\n")
        legend.append(turn_counts(r.get("turns", []), bool(r.get("older_turns_forgotten"))),
                      style="dim")
        return legend


def turn_counts(turns: list[list[int]], older_forgotten: bool) -> str:
    """'3 turns in memory · 1 partly · 2 forgotten' from the engine's [tokens, kept] pairs."""
    whole = sum(1 for tokens, kept in turns if kept >= tokens)
    partly = sum(1 for tokens, kept in turns if 0 < kept < tokens)
    gone = len(turns) - whole - partly
    parts = [f"{whole:,} turn{'s' if whole != 1 else ''} in memory"]
    if partly:
        parts.append(f"{partly:,} partly")
    if gone:
        parts.append(f"{gone:,} forgotten")
    if older_forgotten:
        parts.append("older ones forgotten")
    return " · ".join(parts)
