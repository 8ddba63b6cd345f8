"""The Channel columns of scripts/bench_vulkan.py: one engine backend (vulkan, ggml or numpy), run
its own process so that its resident memory is its own.

Figures, each a median of `repeat` runs:
- prefill tok/s at each prompt length: the ingest alone, into an emptied ring, as llama-bench
  clears its cache between runs. A conversation's first ingest also records its prefill
  command buffers, reported apart as `prefill_first_ms`, and its setup as
  `conversation_setup_ms`; on Vulkan, untimed ingests (PREFILL_WARMUP_S) follow it, so the
  GPU's clocks are up again, as llama-bench's warm-up run and earlier tests leave them;
- decode tok/s of the bare step at each context length, the context ingested first and every
  run started from it again (the ring rolled back, as llama-bench rebuilds its `-d` depth for
  each repetition: a run that went on from the last would time longer contexts than its
  column says);
- the app's generate() loop (greedy sampling from the logits) at the shortest context;
- the snapshot path's arena I/O (active K/V slabs written from and read back into the mapped
  arena views) of the conversation at the context nearest SNAPSHOT_CONTEXT, before its timed
  steps: ~2000 slots, 93 MB, as the figures in docs/vulkan.md and issue 14 were taken.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import resource
import statistics
import time
from pathlib import Path

SNAPSHOT_CONTEXT = 2000  # issue 14's target: save/restore of ~2000 slots (93 MB)
WARMUP_TOKENS = 4  # decode steps before timing: pipelines, clocks, caches
# A GPU idle through a prompt length's first ingest (it records the passes: seconds of
# pipeline builds) clocks down, and three 256-token ingests (~20 ms) end before it clocks up
# again: on an H100 (2026-12-07) the bench then read 10.4k tok/s for a prompt the profiler,
# run after decode steps, read at 42k. Untimed ingests for this long come first on Vulkan.
PREFILL_WARMUP_S = 0.5


def rss_mb() -> dict:
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    mb = lambda k: round(int(fields.get(k, "0 kB").split()[0]) / 1024, 1)  # noqa: E731
    return {"rss_mb": mb("VmRSS"), "rss_peak_mb": mb("VmHWM")}


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def decode_room(max_slots: int, context: int, wanted: int) -> int:
    """Tokens per timed run that keep it inside the ring (each run starts from the context
    again): eviction would time the ring's housekeeping, not the step (4000 tokens leave 96
    of 4096 slots)."""
    room = max_slots - context - WARMUP_TOKENS
    if room < 1:
        raise ValueError(f"a {context}-token context leaves no room in a {max_slots}-slot ring")
    return min(wanted, room)


def bench(backend_name: str, model_path: Path, cache_dir: Path, scratch: Path,
          prefill: list[int], contexts: list[int], decode_tokens: int, repeat: int,
          tuning: dict | None = None) -> dict:
    from engine.conversation import Conversation
    from engine.model.model import load_model
    from engine.state.ring_policy import RingPolicy
    from engine.state.sampler import SamplingSettings
    from engine.tools.bench import synthetic_tokens

    out: dict = {"backend": backend_name}
    t0 = time.perf_counter()
    model = load_model(model_path, cache_dir, f32_weights=backend_name == "numpy")
    out["model_load_s"] = round(time.perf_counter() - t0, 3)
    backend = None
    if backend_name == "vulkan":
        from engine.backends.vulkan.backend import VulkanBackend

        backend = VulkanBackend()
        if tuning:  # knobs a sweep chose on this device (scripts/device/pick_tuning.py)
            backend.tuning = dataclasses.replace(backend.tuning, **tuning)
        out["tuning"] = backend.tuning.__dict__
    elif backend_name == "ggml":
        from engine.backends.ggml.backend import GgmlBackend

        backend = GgmlBackend()
    policy = RingPolicy()
    vocab = model.config.vocab_size

    def conversation() -> Conversation:
        gc.collect()  # an arena and its views form a cycle: free the last one first
        return Conversation(model, policy, backend=backend)

    t0 = time.perf_counter()
    conversation()
    out["first_conversation_s"] = round(time.perf_counter() - t0, 3)  # vulkan: weight upload

    setup, out["prefill_tok_s"], out["prefill_runs"], out["prefill_first_ms"] = [], {}, {}, {}
    for n in prefill:
        ids = synthetic_tokens(vocab, n, 0)
        gc.collect()  # outside the timed setup
        t0 = time.perf_counter()
        conv = Conversation(model, policy, backend=backend)
        setup.append(time.perf_counter() - t0)
        empty = conv.ring.mark()
        t0 = time.perf_counter()
        conv.ingest(ids)  # the first ingest records the conversation's prefill passes
        out["prefill_first_ms"][str(n)] = round((time.perf_counter() - t0) * 1e3, 2)
        warm_until = time.perf_counter() + (PREFILL_WARMUP_S if backend_name == "vulkan" else 0)
        while time.perf_counter() < warm_until:
            conv.ring.rollback(empty)
            conv.ingest(ids)
        runs = []
        for _ in range(repeat):  # then the ring is emptied, as llama-bench clears its cache
            conv.ring.rollback(empty)
            t0 = time.perf_counter()
            conv.ingest(ids)
            runs.append(n / (time.perf_counter() - t0))
        out["prefill_tok_s"][str(n)] = round(statistics.median(runs), 2)
        out["prefill_runs"][str(n)] = [round(x, 2) for x in runs]
        del conv
    out["conversation_setup_ms"] = round(statistics.median(setup) * 1e3, 2)

    out["decode_tok_s"], out["decode_runs"], out["decode_tokens"] = {}, {}, {}
    snapshot_at = min(contexts, key=lambda c: abs(c - SNAPSHOT_CONTEXT))
    for context in sorted(contexts):
        n = decode_room(policy.max_slots, context, decode_tokens)
        conv = conversation()
        conv.ingest(synthetic_tokens(vocab, context, 1))
        start = conv.ring.mark()
        for token in synthetic_tokens(vocab, WARMUP_TOKENS, 2):
            conv.forward.decode_one_token(token)
        steps = synthetic_tokens(vocab, n, 3)
        if context == snapshot_at:  # before the timed steps: context + 4 slots, as today's
            out["arena_bytes"] = conv.arena.nbytes
            out.update(snapshot_io(conv, scratch, min(repeat, 3)))
            if backend is not None:
                out["device"] = backend.describe()
                out["dispatches_per_token"] = getattr(conv.forward, "dispatches_per_token", None)
        cpu0, runs = cpu_s(), []
        for _ in range(repeat):
            conv.ring.rollback(start)
            t0 = time.perf_counter()
            for token in steps:
                conv.forward.decode_one_token(token)
            runs.append(n / (time.perf_counter() - t0))
        out["decode_tok_s"][str(context)] = round(statistics.median(runs), 2)
        out["decode_runs"][str(context)] = [round(x, 2) for x in runs]
        out["decode_tokens"][str(context)] = n
        if context == min(contexts):
            # CPU seconds (all threads) per token: steadier than wall clock on a shared machine.
            out["decode_cpu_ms_per_token"] = round((cpu_s() - cpu0) * 1e3 / (n * repeat), 2)
            gc.collect()
            out["rss_decoding_mb"] = rss_mb()["rss_mb"]
        del conv

    gen = conversation()
    gen.ingest(synthetic_tokens(vocab, min(contexts), 3))
    result = gen.generate(SamplingSettings(), decode_tokens, frozenset())
    out["generate_tok_s"] = round(result.tok_s, 2)  # decode + greedy sampling from logits
    out["model_fingerprint"] = model.fingerprint
    out.update(rss_mb())
    return out


def snapshot_io(conv, scratch: Path, repeat: int) -> dict:
    """Write the live K/V slabs and slot metadata straight from the arena views (1 MiB
    buffered, fsync), then read them back into the views: the snapshot path's data movement.
    Medians of `repeat` save/restore pairs."""
    import numpy as np

    v, n = conv.arena.views(), conv.ring.n_active
    path = scratch / f"arena-{os.getpid()}.bin"
    names = ["k_cache", "v_cache", "slot_clock", "slot_pos", "slot_active", "slot_salience"]
    saves, restores = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        # Vulkan on a GPU stages the regions through host-cached memory; elsewhere, the views.
        reader = getattr(conv.forward, "read_regions", None)
        src = reader(names) if reader else {name: getattr(v, name) for name in names}
        with open(path, "wb", buffering=1 << 20) as f:
            for plane in (src["k_cache"], src["v_cache"]):
                for layer in plane:
                    f.write(memoryview(np.ascontiguousarray(layer[:n])).cast("B"))
            for name in names[2:]:
                f.write(memoryview(src[name][:n]).cast("B"))
            f.flush()
            os.fsync(f.fileno())
        saves.append(time.perf_counter() - t0)
        nbytes = path.stat().st_size
        t0 = time.perf_counter()
        with open(path, "rb", buffering=0) as f:
            for plane in (v.k_cache, v.v_cache):
                for layer in plane:
                    f.readinto(memoryview(layer[:n]).cast("B"))
            for meta in (v.slot_clock, v.slot_pos, v.slot_active, v.slot_salience):
                f.readinto(memoryview(meta[:n]).cast("B"))
        restores.append(time.perf_counter() - t0)
        path.unlink()
    return {"snapshot_path": conv.forward.snapshot_path,
            "snapshot_slots": n, "snapshot_bytes": nbytes,
            "snapshot_save_ms": round(statistics.median(saves) * 1e3, 2),
            "snapshot_restore_ms": round(statistics.median(restores) * 1e3, 2)}
