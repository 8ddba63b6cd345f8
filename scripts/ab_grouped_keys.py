"""The grouped decode Q.K product against one product per K/V head, in one process.

    .venv/bin/python scripts/ab_grouped_keys.py [--model PATH] [--context 4000] [--steps 100]

Two conversations on one ggml backend, filled alike: one builds its graphs with the grouped
product (engine/backends/ggml/attend.py key_group), the other with one product per head.
Their decode steps alternate, so both see the same machine state; on a VM whose speed drifts
by tens of percent between runs this is the comparison that holds. Prints the median step of
each and their ratio. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.backends.ggml import graph  # noqa: E402
from engine.backends.ggml.backend import GgmlBackend  # noqa: E402
from engine.conversation import Conversation  # noqa: E402
from engine.model.model import load_model  # noqa: E402
from engine.tools.bench import synthetic_tokens  # noqa: E402

WARMUP_STEPS = 4  # the first steps build each conversation's graphs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--cache-dir", type=Path, default=REPO / ".cache" / "profile")
    parser.add_argument("--context", type=int, default=4000)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()

    grouped_rule = graph.key_group
    per_head = {"on": False}

    def key_group(head_dim: int, n_kv_heads: int, group_size: int) -> int:
        return 1 if per_head["on"] else grouped_rule(head_dim, n_kv_heads, group_size)

    graph.key_group = key_group  # the builder decides once per graph (attend.py reads it)
    model = load_model(args.model, args.cache_dir)
    cfg = model.config
    print(f"{model.name}: {cfg.n_kv_heads} K/V heads of {cfg.head_dim}, G = {cfg.group_size}; "
          f"grouped {grouped_rule(cfg.head_dim, cfg.n_kv_heads, cfg.group_size)} heads a call")
    backend = GgmlBackend()
    conversations = {}
    for form in ("per_head", "grouped"):
        per_head["on"] = form == "per_head"
        conversations[form] = Conversation(model, backend=backend)
        conversations[form].ingest(synthetic_tokens(cfg.vocab_size, args.context, seed=1))
    times: dict[str, list[float]] = {form: [] for form in conversations}
    for step, token in enumerate(synthetic_tokens(cfg.vocab_size, args.steps, seed=2)):
        order = ("per_head", "grouped") if step % 2 else ("grouped", "per_head")
        for form in order:  # each form goes first on every other step
            per_head["on"] = form == "per_head"
            start = time.perf_counter()
            conversations[form].forward.decode_one_token(int(token))
            if step >= WARMUP_STEPS:
                times[form].append(time.perf_counter() - start)
    old, new = (statistics.median(times[form]) for form in ("per_head", "grouped"))
    print(f"{args.context} slots: per head {1 / old:.1f} tok/s, grouped {1 / new:.1f} tok/s, "
          f"grouped / per head {old / new:.3f}")


if __name__ == "__main__":
    main()
