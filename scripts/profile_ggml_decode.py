"""Where a ggml decode step's time goes, node by node, at a given ring occupancy.

    .venv/bin/python scripts/profile_ggml_decode.py [--model PATH] [--context 2048] [--steps 32]
    .venv/bin/python scripts/profile_ggml_decode.py --context 1024 --prefill 1024

With --prefill N it profiles reading N more tokens after the context instead (prefill chunks;
the rows are then per read of N tokens, not per decode step).

ggml's CPU backend calls its abort callback on the first thread after each node, before the
barrier that ends it; the time between two calls is that thread's share of the node plus the
wait at the barrier before it (so a node whose work is uneven between threads shows up in the
next node's row). The callback itself costs some microseconds a node, so the total runs
slower than `channel bench`'s decode and small nodes look dearer than they are. ggml fuses an
RMS_NORM with the MUL after it and stamps the pair once, which would shift every later label,
so the profile runs with fusion off (GGML_CPU_DISABLE_FUSION, read when ggml starts). Nodes are
grouped by operation and by the shapes of their first two sources, so that, for example, the
attention products over the ring stand apart from the weight products. Run it on an
otherwise idle machine: a busy core stalls the threads' spin-waits.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path

os.environ["GGML_CPU_DISABLE_FUSION"] = "1"  # before ggml loads: one stamp per node

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.backends.ggml.backend import GgmlBackend  # noqa: E402
from engine.backends.ggml.lib import ggml  # noqa: E402
from engine.conversation import Conversation  # noqa: E402
from engine.model.model import load_model  # noqa: E402
from engine.tools.bench import synthetic_tokens  # noqa: E402


def node_label(g, node) -> str:
    """op(src0 shape, src1 shape): shapes as ggml's ne, outermost trimmed of 1s."""
    t = node.contents
    parts = []
    for src in t.src[:2]:
        if not src:
            continue
        ne = list(src.contents.ne)
        while len(ne) > 1 and ne[-1] == 1:
            ne.pop()
        parts.append("x".join(map(str, ne)))
    return f"{g.ggml_op_desc(node).decode()}({', '.join(parts)})"


class NodeClock:
    """The abort callback that stamps each node; `profile` sums a graph's stamps by label."""

    def __init__(self) -> None:
        self.stamps: list[float] = []

    def __call__(self) -> bool:
        self.stamps.append(time.perf_counter())
        return False  # never stop the graph

    def profile(self, g, graph, start: float, into: dict[str, list[float]]) -> None:
        # The callback fires once per computed node, in graph order; ggml skips the no-ops
        # (ggml_op_is_empty: views, reshapes) as EMPTY_OPS does here.
        nodes = [g.ggml_graph_node(graph, i) for i in range(g.ggml_graph_n_nodes(graph))]
        computed = [n for n in nodes if node_label(g, n).split("(")[0] not in EMPTY_OPS]
        previous = start
        for node, stamp in zip(computed, self.stamps):
            into[node_label(g, node)].append(stamp - previous)
            previous = stamp
        self.stamps.clear()


EMPTY_OPS = {"NONE", "RESHAPE", "VIEW", "PERMUTE", "TRANSPOSE"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--cache-dir", type=Path, default=REPO / ".cache" / "profile")
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--prefill", type=int, default=0,
                        help="profile reading this many tokens after the context, not decode")
    parser.add_argument("--json", action="store_true", help="one JSON line, not a table")
    args = parser.parse_args()

    g = ggml()
    model = load_model(args.model, args.cache_dir)
    backend = GgmlBackend()
    conv = Conversation(model, backend=backend)
    vocab = model.config.vocab_size
    conv.ingest(synthetic_tokens(vocab, max(args.context, 1), seed=1))
    steps = iter(synthetic_tokens(vocab, args.steps + 4, seed=2))
    for _ in range(4):  # warm-up: graphs built, threads tuned
        conv.forward.decode_one_token(next(steps))

    clock, times = NodeClock(), collections.defaultdict(list)
    run = backend.run

    def profiled_run(graph, *, timed: bool, should_stop=None) -> bool:
        start = time.perf_counter()
        done = run(graph, timed=timed, should_stop=clock)
        clock.profile(g, graph.graph, start, times)
        return done

    backend.run = profiled_run
    start = time.perf_counter()
    if args.prefill:  # one read of that many tokens stands for a "step"
        args.steps = 1
        conv.ingest(synthetic_tokens(vocab, args.prefill, seed=3))
    else:
        for _ in range(args.steps):
            conv.forward.decode_one_token(next(steps))
    step_ms = (time.perf_counter() - start) / args.steps * 1e3
    rows = sorted(((sum(v) / args.steps * 1e3, len(v) // args.steps, k)
                   for k, v in times.items()), reverse=True)
    total = sum(ms for ms, _, _ in rows)
    if args.json:
        print(json.dumps({"model": model.name, "context": args.context,
                          "prefill": args.prefill, "step_ms": step_ms,
                          "nodes_ms": total, "threads": backend.tuner.describe(),
                          "nodes": [{"label": k, "ms": round(ms, 4), "per_step": n}
                                    for ms, n, k in rows]}))
        return
    what = f"a read of {args.prefill} tokens" if args.prefill else "a step"
    print(f"{model.name}: {args.context} slots, {step_ms:.2f} ms {what} "
          f"({total:.2f} ms in nodes), {backend.tuner.describe()}")
    for ms, n, label in rows[:25]:
        print(f"{ms:8.3f} ms {100 * ms / total:5.1f}%  x{n:<3d} {label}")


if __name__ == "__main__":
    main()
