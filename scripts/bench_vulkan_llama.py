"""The llama.cpp column of scripts/bench_vulkan.py: run `llama-bench` and read its JSON.

Two runs on the same GGUF, all layers on the GPU, flash attention off and on, as issue 14
measured them:
    llama-bench -m GGUF -ngl 99 -fa 0,1 -p 256,2048 -n 128 -r 5 -o json
    llama-bench -m GGUF -ngl 99 -fa 0,1 -p 0 -n 128 -d 2000,4000 -r 5 -o json
The first gives prefill (`pp`) at each prompt length and decode (`tg`) from an empty context,
which stands for the bench's shortest context (16 tokens); the second gives decode after
`-d` tokens already in the K/V cache, for the longer ones. Each test's figure is the median of
its samples (`samples_ts`, one per repetition), like the engine columns' medians.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from collections.abc import Sequence
from pathlib import Path

GEN_TOKENS = 128  # tokens generated per tg test (llama-bench -n)
FA_NAMES = {0: "fa_off", 1: "fa_on"}


def commands(binary: Path, model: Path, prefill: Sequence[int], contexts: Sequence[int],
             repeat: int, gen_tokens: int = GEN_TOKENS) -> list[list[str]]:
    """The llama-bench command lines: prefill + short decode, then decode at depth."""
    base = [str(binary), "-m", str(model), "-ngl", "99", "-fa", "0,1", "-r", str(repeat),
            "-o", "json"]
    joined = ",".join(str(n) for n in prefill)
    runs = [base + ["-p", joined, "-n", str(gen_tokens)]]
    depths = sorted(contexts)[1:]  # the shortest context is the empty-cache tg test
    if depths:
        runs.append(base + ["-p", "0", "-n", str(gen_tokens),
                            "-d", ",".join(str(d) for d in depths)])
    return runs


def run(binary: Path, model: Path, prefill: Sequence[int], contexts: Sequence[int],
        repeat: int, timeout: float, gen_tokens: int = GEN_TOKENS) -> list[dict]:
    """Every test record of both runs, as llama-bench wrote them."""
    records: list[dict] = []
    for cmd in commands(binary, model, prefill, contexts, repeat, gen_tokens):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {tail}")
        records.extend(json.loads(proc.stdout))
    return records


def _fa(record: dict) -> int:
    # An int (-1 auto, 0, 1) in current llama-bench; a bool in older ones.
    return int(record["flash_attn"])


def summarise(records: list[dict], contexts: Sequence[int]) -> dict:
    """Per flash-attention setting, `prefill_tok_s` by prompt length and `decode_tok_s` by
    context (the shortest context reads the depth-0 tg test), medians of the samples."""
    shortest = min(contexts) if contexts else 0
    out: dict = {}
    for record in records:
        name = FA_NAMES.get(_fa(record))
        if name is None:  # 'auto': not one of the two columns
            continue
        column = out.setdefault(name, {"prefill_tok_s": {}, "decode_tok_s": {},
                                       "prefill_runs": {}, "decode_runs": {}})
        samples = [float(x) for x in record["samples_ts"]]
        if record["n_prompt"] > 0 and record["n_gen"] == 0:
            kind, key = "prefill", str(record["n_prompt"])
        elif record["n_gen"] > 0 and record["n_prompt"] == 0:
            depth = record.get("n_depth", 0)
            kind, key = "decode", str(depth if depth else shortest)
        else:
            continue  # pp+tg combined tests (-pg) are not reported
        column[f"{kind}_tok_s"][key] = round(statistics.median(samples), 2)
        column[f"{kind}_runs"][key] = [round(x, 2) for x in samples]
    if records:
        first = records[0]
        out["build"] = {k: first.get(k) for k in
                        ("build_commit", "build_number", "gpu_info", "backends", "model_type",
                         "model_size", "n_batch", "n_ubatch", "type_k", "type_v")}
        out["decode_tokens"] = int(next((r["n_gen"] for r in records if r["n_gen"]), 0))
    return out
