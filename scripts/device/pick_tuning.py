"""Pick the Vulkan tuning knobs a sweep measured best on this device.

    python scripts/device/pick_tuning.py DECODE.jsonl PREFILL.jsonl > tuning.json

Reads scripts/sweep_vulkan.py's JSON lines and, for decode and for prefill separately, keeps
the knob combination with the best geometric mean tok/s over the contexts (or prompt lengths)
it was measured at: no single length may decide. Prints a JSON object of Tuning fields for
bench_vulkan.py --tuning-json.
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sweep_vulkan import DECODE_KNOBS  # noqa: E402  (the knobs the sweep writes per row)

PREFILL_KNOBS = ("prefill_splits", "prefill_queries", "coopmat")


def best(path: str, knobs: tuple[str, ...], rate: str) -> dict:
    rates: dict[tuple, list[float]] = defaultdict(list)
    with open(path) as f:
        for line in f:
            if line.startswith("{"):
                row = json.loads(line)
                rates[tuple(row[k] for k in knobs)].append(row[rate])
    if not rates:
        return {}
    most = max(len(v) for v in rates.values())  # a combination that missed a length loses
    combo = max((c for c, v in rates.items() if len(v) == most),
                key=lambda c: sum(math.log(r) for r in rates[c]))
    return dict(zip(knobs, combo))


def main() -> int:
    decode, prefill = sys.argv[1], sys.argv[2]
    print(json.dumps({**best(decode, DECODE_KNOBS, "decode_tok_s"),
                      **best(prefill, PREFILL_KNOBS, "prefill_tok_s")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
