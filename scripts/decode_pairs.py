"""Decode ratios against llama.cpp from alternating pairs of runs, one ring occupancy at a time.

    .venv/bin/python scripts/decode_pairs.py [--model PATH] [--occupancy 0 2048 4000] [--pairs 5]

Separate sweeps of the two engines an hour apart moved the 2048-slot ratio by up to 0.3x on
the 2-core development VM (docs/performance.md), more than the targets' margins. Here the
engines take turns instead: for each occupancy, each pair is one Channel run and one
llama.cpp run back to back, their order swapped from one pair to the next so that a drift
favours neither, and the figure is the median of the pairs' ratios. Each run is its own
process (scripts/decode_vs_ring.py with --repeats 1: fill the ring with one prefill, one
untimed step, then the timed steps on the same tokens for both engines), so that the two
ggml libraries never share one. The Python running this needs llama-cpp-python (the
`llamacpp` extra). Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def one_run(engine: str, occupancy: int, model: str | None, threads: int) -> float:
    """Decode tok/s of one run of `engine` ("channel" or "llama") at `occupancy` slots."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        command = [sys.executable, str(HERE / "decode_vs_ring.py"), engine, str(out),
                   "--occupancy", str(occupancy), "--repeats", "1", "--threads", str(threads)]
        if model:
            command += ["--model", model]
        subprocess.run(command, check=True, stderr=subprocess.DEVNULL)
        return float(json.loads(out.read_text())["tok_s"][str(occupancy)])


def pairs_at(occupancy: int, count: int, model: str | None, threads: int) -> dict:
    channel, llama = [], []
    for i in range(count):
        order = ("channel", "llama") if i % 2 == 0 else ("llama", "channel")
        runs = {engine: one_run(engine, occupancy, model, threads) for engine in order}
        channel.append(round(runs["channel"], 1))
        llama.append(round(runs["llama"], 1))
        print(f"ring {occupancy}, pair {i + 1}: Channel {runs['channel']:.1f}, llama.cpp "
              f"{runs['llama']:.1f} tok/s", file=sys.stderr, flush=True)
    ratios = [round(c / ll, 3) for c, ll in zip(channel, llama, strict=True)]
    return {"occupancy": occupancy, "channel_tok_s": channel, "llama_tok_s": llama,
            "ratios": ratios, "median_ratio": round(statistics.median(ratios), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a GGUF (default: the shipped model)")
    parser.add_argument("--occupancy", type=int, nargs="+", default=[0, 2048, 4000])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    for occupancy in args.occupancy:
        print(json.dumps(pairs_at(occupancy, args.pairs, args.model, args.threads)), flush=True)


if __name__ == "__main__":
    main()
