"""Vulkan tok/s over the attention knobs of engine/backends/vulkan/tuning.py: one JSON line each.

    python scripts/sweep_vulkan.py decode [--contexts 16,2000,4000] [--steps 64] [--model GGUF]
        [--split-slots 16,32,64] [--max-splits 32,64,128] [--pv-tile 1,0] [--mass-split 4]
        [--fold-loads 4,16] [--argmax-groups 1,16] [--split-subgroups 1,4] [--value-loads 8,16]
        [--split 16,32] [--wg 64,128] [--rows 2,4] [--logits-rows 2,4]
    python scripts/sweep_vulkan.py prefill [--prompts 256,2048] [--repeat 3] [--model GGUF]
        [--prefill-splits 1,4,16] [--prefill-queries 16,8,4] [--coopmat 1,0]

For one lease on a GPU, on the tuning the device gets (or --tuning) with the knobs swapped (a
knob not given keeps the device's value). decode:
each context is prefilled once, then every combination records its own decode pass over that
same ring (backend.make_forward) and rolls the ring back afterwards, so a combination costs
its decode steps only and every one sees the same context. prefill: every combination ingests
each prompt once to record its passes, rolls back, then times `repeat` more ingests (median),
host time included, as docs/vulkan.md's prefill figures. On lavapipe the GPU shapes prefill
the shipped model at ~4.5 tok/s, so a 256-token chunk nears the 60 s fence timeout: try the
sweep there with `--tuning gpu prefill --prompts 32`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


# Tuning fields the decode sweep can vary: split attention's, then the matrix products' shape.
DECODE_KNOBS = ("split_slots", "max_splits", "pv_tile", "mass_split", "fold_loads",
                "argmax_groups", "split_subgroups", "value_loads", "split", "wg", "rows",
                "logits_rows")


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def sweep_decode(args, model, backend, policy) -> None:
    from engine.backends.vulkan.tuning import split_runs
    from engine.conversation import Conversation
    from engine.tools.bench import synthetic_tokens

    base, vocab = backend.tuning, model.config.vocab_size
    # Each knob's values: as given, else the device's tuning's own.
    values = {k: getattr(args, k) or [getattr(base, k)] for k in DECODE_KNOBS}
    combos = [dict(zip(values, c)) for c in itertools.product(*values.values())]
    for ctx in args.contexts:
        backend.tuning = base
        conv = Conversation(model, policy, backend=backend)
        conv.ingest(synthetic_tokens(vocab, ctx, 0))
        mark = conv.ring.mark()
        steps = synthetic_tokens(vocab, args.warmup + args.steps, 1)
        for combo in combos:
            t = replace(base, **{k: type(getattr(base, k))(v) for k, v in combo.items()})
            backend.tuning = t
            forward = backend.make_forward(model, conv.ring)
            for token in steps[: args.warmup]:
                forward.decode_one_token(token)
            live = conv.ring.n_active + 1  # slots the first timed step's token sees
            t0 = time.perf_counter()
            for token in steps[args.warmup :]:
                forward.decode_one_token(token)
            elapsed = time.perf_counter() - t0
            conv.ring.rollback(mark)
            length, count = split_runs(t, live)
            print(json.dumps({
                "context": live, **{k: getattr(t, k) for k in DECODE_KNOBS},
                "splits": count, "slots_per_split": length,
                "workgroups": count * model.config.n_kv_heads,
                "decode_tok_s": round(args.steps / elapsed, 1),
                "dispatches_per_token": forward.dispatches_per_token,
                "device": backend.ctx.info.name}), flush=True)
    backend.tuning = base


def sweep_prefill(args, model, backend, policy) -> None:
    from engine.conversation import Conversation
    from engine.tools.bench import synthetic_tokens

    base, vocab = backend.tuning, model.config.vocab_size
    combos = list(itertools.product(args.prefill_splits, args.prefill_queries, args.coopmat,
                                    args.coopmat_tokens or [base.coopmat_tokens]))
    for n in args.prompts:
        ids = synthetic_tokens(vocab, n, 0)
        for splits, queries, coopmat, tile_tokens in combos:
            # every product in tiles of tile_tokens: no wide tiles by product size
            backend.tuning = replace(base, prefill_splits=splits, prefill_queries=queries,
                                     coopmat=bool(coopmat), coopmat_tokens=tile_tokens,
                                     coopmat_wide=0)
            conv = Conversation(model, policy, backend=backend)
            mark = conv.ring.mark()
            conv.ingest(ids)  # records the passes and specializes the pipelines
            times = []
            for _ in range(args.repeat):
                conv.ring.rollback(mark)
                t0 = time.perf_counter()
                conv.ingest(ids)
                times.append(time.perf_counter() - t0)
            print(json.dumps({
                "prompt": n, "prefill_splits": splits, "prefill_queries": queries,
                "coopmat": bool(coopmat) and backend.ctx.coopmat, "coopmat_tokens": tile_tokens,
                "prefill_tok_s": round(n / statistics.median(times), 1),
                "chunk": conv.forward.chunk, "device": backend.ctx.info.name}), flush=True)
    backend.tuning = base


def main(argv: list[str] | None = None) -> int:
    from engine.backends.vulkan import options
    from engine.backends.vulkan.backend import VulkanBackend
    from engine.model.model import load_model
    from engine.paths import default_model_path
    from engine.state.ring_policy import RingPolicy

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="a GGUF (default: the shipped model)")
    p.add_argument("--cache-dir", default=str(REPO / ".cache" / "sweep"))
    p.add_argument("--tuning", choices=["gpu", "cpu"], help="force these shapes (default: the "
                   "device's); gpu on lavapipe tries the sweep out without a GPU")
    sub = p.add_subparsers(dest="what", required=True)
    d = sub.add_parser("decode", help="decode tok/s over the attention and product knobs")
    d.add_argument("--contexts", type=ints, default=[16, 2000, 4000])
    d.add_argument("--steps", type=int, default=64, help="timed decode steps per combination")
    d.add_argument("--warmup", type=int, default=4)
    for knob in DECODE_KNOBS:
        d.add_argument("--" + knob.replace("_", "-"), type=ints,
                       help=f"values of Tuning.{knob} (default: the device's)")
    f = sub.add_parser("prefill", help="prefill tok/s over the tiled prefill attention knobs")
    f.add_argument("--prompts", type=ints, default=[256, 2048])
    f.add_argument("--repeat", type=int, default=3, help="timed ingests per combination")
    f.add_argument("--prefill-splits", type=ints, default=[1, 4, 16])
    f.add_argument("--prefill-queries", type=ints, default=[16, 8, 4])
    f.add_argument("--coopmat", type=ints, default=[1, 0])
    f.add_argument("--coopmat-tokens", type=ints, help="tokens per cooperative-matrix tile "
                   "(32 or 64; default: the device's)")
    args = p.parse_args(argv)

    model = load_model(args.model or default_model_path(), args.cache_dir)
    options.configure(replace(options.current(), tuning=args.tuning))
    backend = VulkanBackend()
    longest = max(args.contexts) + args.warmup + args.steps + 1 if args.what == "decode" \
        else max(args.prompts)
    policy = RingPolicy()  # grown where a context would not fit without evicting
    policy = replace(policy, max_slots=max(policy.max_slots, longest))
    sweep = sweep_decode if args.what == "decode" else sweep_prefill
    sweep(args, model, backend, policy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
