"""Where a Vulkan step's time goes: device time per dispatch (timestamps), the host's share, and
decode tok/s over the matrix-vector workgroup shapes. One JSON line per measurement.

    python scripts/profile_vulkan.py [--model GGUF] [--contexts 16,2000,4000]
        [--prefill 256,2048] [--steps 32] [--variant wg=64,split=32 ...] [--tuning gpu|cpu]
        [--shader-dir DIR]

- `round_trip`: submitting an empty command buffer and waiting for it (the floor of any step).
- `decode`: per context, host ms per decode_one_token (untimed passes), the part of it spent
  in submit-and-wait, and the device's time per dispatch label (matmul:MODE:K, attention_split,
  mass, ...) summed over the step's layers, medians over --steps steps.
- `prefill`: per prompt length, the ingest's wall time after its passes were recorded (the
  first ingest, recording included, apart) and each chunk's device time per label.
- each `--variant` (tuning.py's knobs, e.g. `max_splits=1,pv_tile=0`): the decode and prefill
  profiles again with those knobs, at every context and prompt length.

The model defaults to the shipped GGUF; a random one of its shape (scripts/make_synthetic_gguf.py)
times the same.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WARMUP_S = 0.5  # decode steps before each context's profile, untimed
sys.path.insert(0, str(REPO))


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def round_trip(ctx, count: int) -> dict:
    """Microseconds to submit an empty command buffer and see its fence signalled, as every
    step does (Submission.run: polling on a GPU, blocking elsewhere)."""
    from engine.backends.vulkan.submit import Submission

    v = ctx.vk
    cb = ctx.command_buffers(1)[0]
    v.vkBeginCommandBuffer(cb, v.VkCommandBufferBeginInfo())
    v.vkEndCommandBuffer(cb)
    sub, times = Submission(ctx, cb), []
    for _ in range(count):
        t0 = time.perf_counter()
        sub.run()
        times.append(time.perf_counter() - t0)
    return {"run_us": round(statistics.median(times) * 1e6, 1)}


class RunClock:
    """Wraps a forward's Submission.run calls to sum the time spent submitting and waiting."""

    def __init__(self, forward):
        self.forward, self.seconds = forward, 0.0
        self._inner = forward._run

        def timed(sub) -> None:
            t0 = time.perf_counter()
            self._inner(sub)
            self.seconds += time.perf_counter() - t0

        forward._run = timed


def profile_decode(conv, forward, steps: int, timer) -> dict:
    """Decode `steps` tokens on `forward` (a pass over conv's ring) untimed, then as many with a
    timestamp after every dispatch; the ring is rolled back afterwards."""
    from engine.backends.vulkan.profiler import summarize
    from engine.tools.bench import synthetic_tokens

    tokens = synthetic_tokens(conv.model.config.vocab_size, 8 + 2 * steps, 1)
    mark = conv.ring.mark()
    # The GPU clocks up under load: without this the first context profiled (right after
    # the pipeline builds) read 229 tok/s at 16 slots against 582 at 2000 (Gemma 3, H100).
    warm_until = time.perf_counter() + WARMUP_S
    while time.perf_counter() < warm_until:
        for token in tokens[:8]:
            forward.decode_one_token(token)
        conv.ring.rollback(mark)  # the context stays the one asked for
    for token in tokens[:8]:
        forward.decode_one_token(token)
    clock = RunClock(forward)
    host = []
    for token in tokens[8 : 8 + steps]:
        t0 = time.perf_counter()
        forward.decode_one_token(token)
        host.append(time.perf_counter() - t0)
    run_ms = clock.seconds * 1e3 / steps
    forward._run = clock._inner
    forward.set_timer(timer)
    samples = []
    for token in tokens[8 + steps :]:
        forward.decode_one_token(token)
        samples.append(timer.read())
    forward.set_timer(None)
    conv.ring.rollback(mark)
    host_ms = statistics.median(host) * 1e3
    return {"what": "decode", "context": mark.counters[0].item(), "host_ms": round(host_ms, 3),
            "tok_s": round(1e3 / host_ms, 1), "submit_wait_ms": round(run_ms, 3),
            "host_rest_ms": round(host_ms - run_ms, 3), "gpu": summarize(samples)}


def use_variant(backend, base, variant: str) -> dict:
    """Give the backend `base` with the knobs of "knob=value,knob=value" (tuning.py's fields;
    "" for base itself) for the conversations it makes next; returns those knobs."""
    knobs = {k: type(getattr(base, k))(int(v)) for k, v in
             (kv.split("=") for kv in variant.split(",") if kv)}
    backend.tuning = replace(base, **knobs)
    return knobs


def decode_contexts(model, backend, policy, contexts: list[int], steps: int, timer,
                    variants: list[str]) -> None:
    """profile_decode at each context, for the device's tuning and each variant of it
    ("knob=value,knob=value": engine/backends/vulkan/tuning.py's fields)."""
    from engine.conversation import Conversation
    from engine.tools.bench import synthetic_tokens

    base = backend.tuning
    for context in contexts:
        backend.tuning = base
        conv = Conversation(model, policy, backend=backend)
        conv.ingest(synthetic_tokens(model.config.vocab_size, context, 0))
        for variant in ["", *variants]:
            knobs = use_variant(backend, base, variant)
            forward = conv.forward if not variant else backend.make_forward(model, conv.ring)
            emit({**profile_decode(conv, forward, steps, timer), "variant": knobs})
        del conv
    backend.tuning = base


def profile_prefill(model, backend, policy, n: int, timer) -> dict:
    from engine.backends.vulkan.profiler import summarize
    from engine.conversation import Conversation
    from engine.tools.bench import synthetic_tokens

    ids = synthetic_tokens(model.config.vocab_size, n, 0)
    conv = Conversation(model, policy, backend=backend)
    mark = conv.ring.mark()
    t0 = time.perf_counter()
    conv.ingest(ids)  # records the pass shapes
    first = time.perf_counter() - t0
    walls = []
    clock = RunClock(conv.forward)
    for _ in range(3):
        conv.ring.rollback(mark)
        t0 = time.perf_counter()
        conv.ingest(ids)
        walls.append(time.perf_counter() - t0)
    run_ms = clock.seconds * 1e3 / 3
    conv.ring.rollback(mark)
    chunks = []
    forward = conv.forward
    forward.set_timer(timer)
    inner = forward._run

    def per_chunk(sub) -> None:
        inner(sub)
        chunks.append(timer.read())

    forward._run = per_chunk
    conv.ingest(ids)
    forward._run = inner
    forward.set_timer(None)
    wall = statistics.median(walls)
    return {"what": "prefill", "tokens": n, "first_ingest_ms": round(first * 1e3, 2),
            "wall_ms": round(wall * 1e3, 2), "tok_s": round(n / wall, 1),
            "submit_wait_ms": round(run_ms, 2), "chunks": len(chunks),
            "gpu_per_chunk": [summarize([c]) for c in chunks]}


def main(argv: list[str] | None = None) -> int:
    from engine.backends.vulkan import options
    from engine.backends.vulkan.backend import VulkanBackend
    from engine.backends.vulkan.profiler import DispatchTimer
    from engine.model.model import load_model
    from engine.paths import default_model_path
    from engine.state.ring_policy import RingPolicy

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="a GGUF (default: the shipped model)")
    p.add_argument("--cache-dir", default=str(REPO / ".cache" / "profile"))
    p.add_argument("--contexts", type=ints, default=[16, 2000, 4000])
    p.add_argument("--prefill", type=ints, default=[256, 2048])
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--variant", action="append", default=[],
                   help="knob=value,... a tuning to profile beside the device's")
    p.add_argument("--tuning", choices=["gpu", "cpu"], help="force these shapes")
    p.add_argument("--shader-dir", type=Path,
                   help="read the SPIR-V from here (another build of shaders/, for an A/B)")
    args = p.parse_args(argv)
    if args.tuning:
        options.configure(replace(options.current(), tuning=args.tuning))
    if args.shader_dir:
        options.configure(replace(options.current(), shader_dir=args.shader_dir))
    model = load_model(Path(args.model) if args.model else default_model_path(),
                       Path(args.cache_dir), f32_weights=False)
    backend = VulkanBackend()
    policy = RingPolicy()
    emit({"what": "device", "name": backend.ctx.info.name, "driver": backend.ctx.info.driver,
          "coopmat": backend.ctx.coopmat, "tuning": backend.tuning.__dict__,
          "shader_dir": str(options.current().shader_dir)})
    emit({"what": "round_trip", **round_trip(backend.ctx, 200)})
    timer = DispatchTimer(backend.ctx)
    decode_contexts(model, backend, policy, args.contexts, args.steps, timer, args.variant)
    base = backend.tuning
    for n in args.prefill:
        for variant in ["", *args.variant]:  # interleaved, so that clock drift hits each alike
            knobs = use_variant(backend, base, variant)
            emit({**profile_prefill(model, backend, policy, n, timer), "variant": knobs})
    backend.tuning = base
    return 0


if __name__ == "__main__":
    sys.exit(main())
