"""`channel bench --quick --json` end to end on the shipped model: every section runs and
reports a figure (a whole bench once failed at its snapshot section because a temporary
directory shadowed the data directory it writes snapshots to)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_quick_bench_reports_every_section(tmp_path, real_model_path) -> None:
    data = tmp_path / "data"
    proc = subprocess.run(
        [sys.executable, "-m", "channel_cli.cli", "bench", "--quick", "--json",
         "--model", str(real_model_path), "--data-dir", str(data),
         "--cache-dir", str(tmp_path / "cache")],
        capture_output=True, text=True, cwd=REPO, timeout=900)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    for key in ("prefill_tok_s", "decode_tok_s_ring0", "cold_replay_ms", "rss_mb",
                "snapshot_save_ms", "snapshot_restore_ms", "warm_boot_ms"):
        assert result[key] > 0, key
    assert result["snapshot_slots"] == 4096 and result["snapshot_bytes"] > 0
    assert result["decode_alloc_buffers_per_token"] == 0
    # Snapshots went to the data directory's disk, and nothing of them stays behind.
    assert data.is_dir() and not any(data.glob("snapbench-*"))
