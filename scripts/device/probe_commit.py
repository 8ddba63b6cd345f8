"""Where Vulkan decode loses time with the live slots on a discrete GPU: an A/B of the ring's
per-step score update (KVRing.commit -> update_scores, numpy on the arena's views).

    python scripts/device/probe_commit.py [--layers 30] [--contexts 16,2000,4000]

On a GPU the arena is BAR memory the CPU reads uncached. For each context this decodes
`--steps` tokens as the engine does (A), then with the score update skipped (B: what a
device-side update would leave), and times update_scores alone on the arena's views and on
host copies of the same arrays. One JSON line per context. The model is a random one of
SmolLM2's shape (tests/tiny_model.py), written here: no GGUF has to travel.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gguf import GGMLQuantizationType as QT  # noqa: E402

import engine.state.ring as ring_module  # noqa: E402
from engine.backends.vulkan.backend import VulkanBackend  # noqa: E402
from engine.conversation import Conversation  # noqa: E402
from engine.model.model import load_model  # noqa: E402
from engine.state.evict_policy import update_scores  # noqa: E402
from engine.state.ring_policy import RingPolicy  # noqa: E402
from engine.tools.bench import synthetic_tokens  # noqa: E402
from tests.tiny_model import TinySpec, write_tiny_gguf  # noqa: E402


def per_step_ms(fn, steps: int) -> float:
    t0 = time.perf_counter()
    for i in range(steps):
        fn(i)
    return (time.perf_counter() - t0) * 1e3 / steps


def probe(model, backend, context: int, count: int) -> dict:
    """Decode `count` tokens after `context` with and without the score update."""
    conv = Conversation(model, RingPolicy(), backend=backend)
    conv.ingest(synthetic_tokens(model.config.vocab_size, context, 0))
    mark, steps = conv.ring.mark(), synthetic_tokens(model.config.vocab_size, count + 4, 1)
    decode = conv.forward.decode_one_token
    out = {"context": context, "device": backend.ctx.info.name,
           "snapshot_path": conv.forward.snapshot_path}
    for name, skip in (("engine_ms", False), ("no_score_update_ms", True)):
        if skip:
            ring_module.update_scores = lambda *a, **k: None
        for t in steps[:4]:
            decode(t)
        out[name] = round(per_step_ms(lambda i: decode(steps[4 + i]), count), 3)
        ring_module.update_scores = update_scores
        conv.ring.rollback(mark)
    v, n = conv.arena.views(), conv.ring.n_active
    scores, mass = v.slot_salience[: n + 1], v.mass[: n + 1]
    host_scores, host_mass = scores.copy(), mass.copy()
    out["update_on_arena_ms"] = round(per_step_ms(
        lambda i: update_scores(conv.policy, scores, mass, n, 1, 1.0), 50), 3)
    out["update_on_host_ms"] = round(per_step_ms(
        lambda i: update_scores(conv.policy, host_scores, host_mass, n, 1, 1.0), 50), 3)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--contexts", default="16,2000,4000")
    p.add_argument("--steps", type=int, default=64)
    args = p.parse_args()
    folder = Path(tempfile.mkdtemp())
    spec = TinySpec(n_layers=args.layers, d_model=576, n_heads=9, n_kv_heads=3, ffn_dim=1536,
                    context_length=8192, tensor_type=QT.Q4_1, seed=1)
    write_tiny_gguf(folder / "m.gguf", spec)
    model = load_model(folder / "m.gguf", folder / "cache", f32_weights=False)
    backend = VulkanBackend()
    for context in (int(c) for c in args.contexts.split(",")):
        print(json.dumps(probe(model, backend, context, args.steps)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
