"""scripts/bench_vulkan.py's llama.cpp column and table, on real llama-bench output.

The fixtures are llama-bench's own stdout (`-o json`) for the two kinds of run the bench
makes, `-ngl 99 -fa 0,1 -p 64,128 -n 16 -r 3` and `-ngl 99 -fa 0,1 -p 0 -n 16 -d 128 -r 3`, on
a tiny random-weight GGUF (scripts/make_synthetic_gguf.py --preset tiny --d-model 128 --heads 2
--kv-heads 1 --ffn 256 --context 8192 --type Q4_1), from the same llama.cpp source as the
device's (scripts/device/build_llama_bench.sh ... -DGGML_CUDA=OFF, built on the development
machine: the JSON is the same whichever backend ran).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import bench_vulkan_llama as llama  # noqa: E402
from bench_vulkan_engine import decode_room  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "llama_bench"
PREFILL, CONTEXTS = [64, 128], [16, 128]


def records() -> list[dict]:
    return [r for name in ("pp_tg.json", "depth.json")
            for r in json.loads((FIXTURES / name).read_text())]


def test_command_lines_are_issue_14s() -> None:
    runs = llama.commands(Path("lb"), Path("m.gguf"), [256, 2048], [16, 2000, 4000], 5)
    base = ["lb", "-m", "m.gguf", "-ngl", "99", "-fa", "0,1", "-r", "5", "-o", "json"]
    assert runs == [base + ["-p", "256,2048", "-n", "128"],
                    base + ["-p", "0", "-n", "128", "-d", "2000,4000"]]
    # One context: no depth run.
    assert len(llama.commands(Path("lb"), Path("m.gguf"), [256], [16], 1)) == 1


def test_summary_is_the_median_of_each_tests_samples() -> None:
    raw = records()
    summary = llama.summarise(raw, CONTEXTS)
    for fa, name in ((0, "fa_off"), (1, "fa_on")):
        column = summary[name]
        assert set(column["prefill_tok_s"]) == {str(n) for n in PREFILL}
        assert set(column["decode_tok_s"]) == {str(c) for c in CONTEXTS}
        for r in (r for r in raw if int(r["flash_attn"]) == fa):
            if r["n_gen"] == 0:
                key, kind = str(r["n_prompt"]), "prefill"
            else:  # the empty-cache tg test stands for the shortest context
                key, kind = str(r["n_depth"] or min(CONTEXTS)), "decode"
            assert column[f"{kind}_tok_s"][key] == round(statistics.median(r["samples_ts"]), 2)
            assert len(column[f"{kind}_runs"][key]) == 3  # -r 3
    assert summary["decode_tokens"] == 16
    assert summary["build"]["backends"] and summary["build"]["build_commit"]
    # The two settings measured different runs, not one run twice.
    assert summary["fa_off"]["prefill_runs"] != summary["fa_on"]["prefill_runs"]


def test_summary_skips_auto_and_combined_tests() -> None:
    raw = records()
    extra = [dict(raw[0], flash_attn=-1), dict(raw[0], n_gen=16)]  # -fa auto, -pg
    assert llama.summarise(raw + extra, CONTEXTS) == llama.summarise(raw, CONTEXTS)


def test_markdown_table_from_a_saved_report(tmp_path: Path) -> None:
    summary = llama.summarise(records(), CONTEXTS)
    on = summary["fa_on"]
    vulkan = {"prefill_tok_s": {k: v / 2 for k, v in on["prefill_tok_s"].items()},
              "decode_tok_s": {"16": on["decode_tok_s"]["16"] * 1.5},  # 128 not measured
              "snapshot_save_ms": 144.0, "snapshot_restore_ms": 26.0, "snapshot_slots": 2017,
              "snapshot_bytes": 93_000_000, "snapshot_path": "staging"}
    report = {"date": "2026-12-02", "settings": {"prefill": PREFILL, "contexts": CONTEXTS,
                                                  "decode_tokens": 8, "repeat": 2},
              "machine": {"gpu": "NVIDIA H200", "driver": "580.159.04"},
              "vulkan": vulkan, "llama_cpp": summary}
    saved, table = tmp_path / "report.json", tmp_path / "table.md"
    saved.write_text(json.dumps(report))
    subprocess.run([sys.executable, str(REPO / "scripts" / "bench_vulkan.py"), "--from-json",
                    str(saved), "--markdown", str(table)], check=True, capture_output=True)
    lines = table.read_text().splitlines()
    assert lines[0].startswith("2026-12-02, NVIDIA H200, driver 580.159.04, medians of 2")
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| ")}
    assert rows["decode tok/s, 16-token context"].endswith("| 1.50× |")
    assert rows["decode tok/s, 128-token context"].split(" | ")[1] == "—"
    for n in PREFILL:
        assert rows[f"prefill tok/s, {n} tokens"].endswith("| 0.50× |")
    assert "144 / 26 ms" in rows["snapshot save / restore, 2017 slots (93 MB), staging"]


def test_decode_room_keeps_the_ring_from_evicting() -> None:
    assert decode_room(4096, 16, 64) == 64
    assert decode_room(4096, 4000, 128) == 92  # 4096 - 4000 - 4 warm-up: each run starts over
    with pytest.raises(ValueError):
        decode_room(4096, 4093, 64)
