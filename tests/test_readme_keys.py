"""The README's key table is F1's, made from the bindings: it cannot drift from the keys."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_key_table_is_made_from_the_bindings() -> None:
    script = ROOT / "scripts" / "readme_keys.py"
    spec = importlib.util.spec_from_file_location("readme_keys", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    table = module.key_table()
    assert "| Ctrl+G |" in table and "| PageUp |" in table  # made from real bindings
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert table in readme, "run scripts/readme_keys.py and paste its table into README.md"
