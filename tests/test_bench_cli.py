"""`channel bench --quick --json` end to end on the shipped model: every section runs and
reports a figure (a whole bench once failed at its snapshot section because a temporary
directory shadowed the data directory it writes snapshots to). On ggml, the CPU default: on
the numpy reference a whole bench, even --quick, takes over a quarter of an hour on 2 cores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_quick_bench_reports_every_section(tmp_path, real_model_path) -> None:
    pytest.importorskip("ggml", reason="ggml-python is not installed (needs a C compiler)")
    data = tmp_path / "data"
    proc = subprocess.run(
        [sys.executable, "-m", "channel_cli.cli", "bench", "--quick", "--json", "--backend", "ggml",
         "--model", str(real_model_path), "--data-dir", str(data),
         "--cache-dir", str(tmp_path / "cache")],
        capture_output=True, text=True, cwd=REPO, timeout=900)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["backend"] == "ggml"
    for key in ("prefill_tok_s", "decode_tok_s_ring0", "cold_replay_ms", "rss_mb",
                "snapshot_save_ms", "snapshot_restore_ms", "warm_boot_ms"):
        assert result[key] > 0, key
    assert result["snapshot_slots"] == 4096 and result["snapshot_bytes"] > 0
    assert result["decode_alloc_buffers_per_token"] == 0
    # Snapshots went to the data directory's disk, and nothing of them stays behind.
    assert data.is_dir() and not any(data.glob("snapbench-*"))
