"""Decode tok/s of the Vulkan backend over split-attention knobs and contexts: one JSON line each.

    python scripts/sweep_vulkan_decode.py [--contexts 16,2000,4000] [--steps 64] [--model GGUF]
        [--split-slots 16,32,64] [--max-splits 32,64,128] [--pv-tile 1,0] [--mass-split 4]

For one lease on a GPU: each context is prefilled once, then every knob combination records
its own decode pass over that same ring (backend.make_forward with the tuning swapped) and
rolls the ring back afterwards, so a combination costs its decode steps only and every one
sees the same context.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    from engine.backends.vulkan.backend import VulkanBackend
    from engine.backends.vulkan.tuning import split_runs
    from engine.model.config import RingPolicy
    from engine.model.model import load_model
    from engine.paths import default_model_path
    from engine.state.conversation import Conversation
    from engine.tools.bench import synthetic_tokens

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(default_model_path()))
    p.add_argument("--cache-dir", default=str(REPO / ".cache" / "sweep"))
    p.add_argument("--contexts", type=ints, default=[16, 2000, 4000])
    p.add_argument("--steps", type=int, default=64, help="timed decode steps per combination")
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--split-slots", type=ints, default=[16, 32, 64])
    p.add_argument("--max-splits", type=ints, default=[32, 64, 128])
    p.add_argument("--pv-tile", type=ints, default=[1, 0])
    p.add_argument("--mass-split", type=ints, default=[4])
    args = p.parse_args(argv)

    model = load_model(args.model, args.cache_dir)
    backend = VulkanBackend()
    base = backend.tuning
    combos = list(itertools.product(args.split_slots, args.max_splits, args.pv_tile,
                                    args.mass_split))
    policy = RingPolicy()  # grown where a context would not fit without evicting
    need = max(args.contexts) + args.warmup + args.steps + 1
    policy = replace(policy, max_slots=max(policy.max_slots, need))
    vocab = model.config.vocab_size
    for ctx in args.contexts:
        backend.tuning = base
        conv = Conversation(model, policy, backend=backend)
        conv.ingest(synthetic_tokens(vocab, ctx, 0))
        mark = conv.ring.mark()
        steps = synthetic_tokens(vocab, args.warmup + args.steps, 1)
        for split_slots, max_splits, pv_tile, mass_split in combos:
            t = replace(base, split_slots=split_slots, max_splits=max_splits,
                        pv_tile=bool(pv_tile), mass_split=mass_split)
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
                "context": live, "split_slots": split_slots,
                "max_splits": max_splits, "pv_tile": bool(pv_tile), "mass_split": mass_split,
                "splits": count, "slots_per_split": length,
                "workgroups": count * model.config.n_kv_heads,
                "decode_tok_s": round(args.steps / elapsed, 1),
                "dispatches_per_token": forward.dispatches_per_token,
                "device": backend.ctx.info.name}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
