"""Print the README's key table: the rows F1 shows, made from the key bindings themselves,
so the README cannot disagree with the keys (tests/test_readme_keys.py checks it).

    python scripts/readme_keys.py    # then paste between the README's keys markers
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from channel_tui.screens.help import help_rows  # noqa: E402

START, END = "<!-- keys: made by scripts/readme_keys.py -->", "<!-- /keys -->"


def key_table() -> str:
    lines = ["| Key | Action |", "|---|---|"]
    lines += [f"| {keys} | {what} |" for keys, what in help_rows()]
    return "\n".join([START, *lines, END])


if __name__ == "__main__":
    print(key_table())
