"""`channel models` as a table a person reads: one row per model, its path beneath."""

from __future__ import annotations

from ..paths import GET_A_MODEL, MODEL_PLACES
from .catalog import CatalogEntry

COLUMNS = ("NAME", "ARCH", "PARAMS", "QUANT", "SIZE", "CTX", "SOURCE", "STATUS")


def count(n: int | None) -> str:
    """A parameter count the way model cards say it: 135M, 1.5B."""
    if n is None:
        return "?"
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f}{unit}" if value >= 100 else f"{value:.3g}{unit}"
    return str(n)


def size(n: int) -> str:
    """Bytes in decimal units, as the app shows them (one unit system everywhere)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def row(entry: CatalogEntry) -> tuple[str, ...]:
    name = entry.label if entry.label == entry.name else f"{entry.label} ({entry.name})"
    status = f"{entry.status} ({entry.layers})" if entry.layers else entry.status
    return (name, entry.architecture or "?", count(entry.parameters),
            entry.quantization or "?", size(entry.file_size),
            f"{entry.context_length:,}" if entry.context_length else "?", entry.source,
            status)


def render_table(entries: list[CatalogEntry]) -> str:
    if not entries:
        return (f"No GGUF models found (looked in {MODEL_PLACES}; see docs/models.md). "
                f"{GET_A_MODEL}.")
    rows = [COLUMNS, *(row(e) for e in entries)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS) - 1)]
    lines = []
    for i, r in enumerate(rows):
        cells = [cell.ljust(w) for cell, w in zip(r[:-1], widths)] + [r[-1]]
        lines.append("  ".join(cells).rstrip())
        if i:
            lines.append(f"  {entries[i - 1].path}")
    return "\n".join(lines)
