"""Measure how long a long message takes to read (prefill tok/s) and how soon Esc stops it.

Starts a real engine on the shipped model, sends a ~5,000-token message, and either lets
the read finish (throughput) or cancels it part-way (time from `cancel` to `end_of_turn`).

    python scripts/measure_read_cancel.py [--backend ggml] [--trials 3] [--ring-slots 8192]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from engine.paths import default_model_path
from engine.process.client import spawn

CACHE = Path(__file__).resolve().parent.parent / ".cache" / "test-weights"
# About 5,000 tokens (rendered): a varied sentence repeated (numbers keep the tokenizer honest).
MESSAGE = " ".join(f"Item {i}: the river bends past the mill and the miller counts sacks."
                   for i in range(250))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", default="ggml")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--cache-dir", type=Path, default=CACHE)
    parser.add_argument("--ring-slots", default="8192")
    parser.add_argument("--cancel-after", type=float, default=1.5,
                        help="seconds after turn_started to cancel")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        e = spawn(Path(data), args.cache_dir, default_model_path(),
                  ["--backend", args.backend, "--ring-slots", args.ring_slots])
        e.wait_for("ready", timeout=300)
        stops, rates = [], []
        for trial in range(args.trials):
            # A fresh session each trial: every read starts from an empty ring.
            session = f"s{trial}"
            e.request({"type": "open", "session": session}, "booted", timeout=300)
            e.send({"type": "turn", "session": session, "text": MESSAGE, "max_tokens": 1,
                    "temperature": 0})
            e.wait_for("turn_started", timeout=60)
            time.sleep(args.cancel_after)
            t0 = time.perf_counter()
            e.send({"type": "cancel", "session": session})
            end = e.wait_for("end_of_turn", timeout=120)
            stops.append(time.perf_counter() - t0)
            print(f"cancel {trial}: stop={end['stop']} after {stops[-1] * 1e3:.0f} ms", flush=True)
            e.send({"type": "turn", "session": session, "text": MESSAGE, "max_tokens": 1,
                    "temperature": 0})
            end = e.wait_for("end_of_turn", timeout=600)
            rates.append(end["prefill_tok_s"])
            print(f"read {trial}: {end['prompt_tokens']} tokens at {rates[-1]:.1f} tok/s",
                  flush=True)
        print(f"cancel-to-end_of_turn: median {statistics.median(stops) * 1e3:.0f} ms, "
              f"max {max(stops) * 1e3:.0f} ms; prefill median {statistics.median(rates):.1f} tok/s")
        e.send({"type": "shutdown"})
        e.proc.wait(120)


if __name__ == "__main__":
    main()
