"""`channel bench --json`: the engine's speed and memory, as one JSON object.

Key names are a stable interface (scripts/bench_llama_cpp.py compares against them). Times are
medians of several runs: these machines are shared and noisy.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info

from ..allocs import measure_allocations, rss_mb
from ..backends.base import Backend
from ..backends.numpy.backend import NumpyBackend
from ..conversation import Conversation
from ..model.model import Model, load_model
from .bench_chain import run_chain_benchmarks
from .bench_policy import bench_policy_bookkeeping
from .bench_replay import bench_replay
from .bench_snapshot import run_snapshot_benchmarks

DECODE_TOKENS = 32
# A busy process for the contention benchmark that also ends if the benchmark is killed.
SPIN_WHILE_PARENT_LIVES = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"


def synthetic_tokens(vocab_size: int, count: int, seed: int = 0) -> list[int]:
    """Ordinary vocabulary ids (no control tokens), reproducible."""
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(100, vocab_size - 100, size=count)]


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_prefill(model: Model, tokens: int, repeat: int, backend: Backend) -> float:
    ids = synthetic_tokens(model.config.vocab_size, tokens)

    def run() -> None:
        Conversation(model, backend=backend).ingest(ids)

    return tokens / median_time(run, repeat)


def bench_decode(model: Model, context: int, repeat: int, backend: Backend) -> float:
    conv = Conversation(model, backend=backend)
    if context:
        conv.ingest(synthetic_tokens(model.config.vocab_size, context, seed=1))
    else:
        conv.ingest(synthetic_tokens(model.config.vocab_size, 1, seed=1))
    token = iter(synthetic_tokens(model.config.vocab_size, DECODE_TOKENS * (repeat + 1), seed=2))
    conv.forward.decode_one_token(next(token))  # warm-up

    def run() -> None:
        for _ in range(DECODE_TOKENS):
            conv.forward.decode_one_token(next(token))

    # Each run adds DECODE_TOKENS to the context; 4000 + 32 * repeat stays under 4096 slots.
    return DECODE_TOKENS / median_time(run, repeat)


def bench_decode_contended(model: Model, repeat: int, backend: Backend) -> float:
    """Decode tok/s (short context) while another process keeps one core busy, as a user's
    build or browser would. The first DECODE_TOKENS * 3 tokens let the backend adapt."""
    conv = Conversation(model, backend=backend)
    conv.ingest(synthetic_tokens(model.config.vocab_size, 1, seed=1))
    token = iter(synthetic_tokens(model.config.vocab_size, DECODE_TOKENS * (repeat + 4), seed=5))
    busy = subprocess.Popen([sys.executable, "-c", SPIN_WHILE_PARENT_LIVES])  # one core
    try:
        for _ in range(DECODE_TOKENS * 3):
            conv.forward.decode_one_token(next(token))

        def run() -> None:
            for _ in range(DECODE_TOKENS):
                conv.forward.decode_one_token(next(token))

        return DECODE_TOKENS / median_time(run, repeat)
    finally:
        busy.kill()
        busy.wait()


def bench_allocations(model: Model, backend: Backend) -> dict:
    gc.collect()  # drop the arenas of earlier benchmarks before measuring memory
    conv = Conversation(model, backend=backend)
    conv.ingest(synthetic_tokens(model.config.vocab_size, 64, seed=3))
    token = iter(synthetic_tokens(model.config.vocab_size, 64, seed=4))
    conv.forward.decode_one_token(next(token))
    steps = 16
    report = measure_allocations(lambda: conv.forward.decode_one_token(next(token)), steps)
    return {
        "decode_alloc_bytes_per_token": max(report.numpy_net_bytes, 0) // steps,
        "decode_alloc_buffers_per_token": report.numpy_new_buffers / steps,
        "decode_peak_transient_bytes": report.peak_transient_bytes,
        "arena_bytes": conv.arena.nbytes,
        "arena_payload_allocations": 1,
        "arena_regions": len(conv.layout.regions),
    }


def run_benchmarks(model_path: Path | None, cache_dir: Path, quick: bool = False,
                   scratch_dir: Path | None = None, backend: Backend | None = None,
                   only_snapshots: bool = False) -> dict:
    """All figures in one JSON-ready dict. `scratch_dir` is where snapshot files are written
    (the data directory's disk, so that disk figures describe it). `only_snapshots`: the
    snapshot and chain figures alone."""
    repeat = 1 if quick else 3
    backend = backend or NumpyBackend()
    f32 = backend.needs_f32_weights
    result: dict = {"backend": backend.name, "quick": quick}
    scratch = Path(scratch_dir) if scratch_dir else Path(tempfile.gettempdir())
    scratch.mkdir(parents=True, exist_ok=True)
    context = 800 if quick else 4000
    if only_snapshots:
        model = load_model(model_path, cache_dir, f32_weights=f32)
        result["model"] = model.name
        result.update(run_snapshot_benchmarks(model, scratch, repeat, context, backend))
        result.update(run_chain_benchmarks(model, scratch, repeat, backend))
        return result

    with tempfile.TemporaryDirectory(prefix="channel-bench-") as empty_cache:
        t0 = time.perf_counter()
        cold = load_model(model_path, Path(empty_cache), f32_weights=f32)
        result["weights_load_s"] = round(time.perf_counter() - t0, 3)
        del cold
    load_model(model_path, cache_dir, f32_weights=f32)  # make sure the cache exists
    result["weights_load_cached_s"] = round(
        median_time(lambda: load_model(model_path, cache_dir, f32_weights=f32),
                    max(repeat, 3)), 4
    )
    model = load_model(model_path, cache_dir, f32_weights=f32)
    result["model"] = model.name
    result["model_fingerprint"] = model.fingerprint
    # The numpy backend's f32 image; the quantized backends read the GGUF's own bytes.
    result["weights_bytes"] = (model.weights.nbytes if model.weights is not None
                               else sum(t.nbytes for t in model.tensors.values()))

    prefill_tokens = 512 if quick else 2048
    result["prefill_tokens"] = prefill_tokens
    result["prefill_tok_s"] = round(bench_prefill(model, prefill_tokens, repeat, backend), 2)
    for context in (0, 2048, 4000):
        key = f"decode_tok_s_ring{context}"
        if quick and context:
            continue
        result[key] = round(bench_decode(model, context, repeat, backend), 2)
    # Each eviction policy's per-token bookkeeping against decode at a full ring.
    result["policy_bookkeeping"] = bench_policy_bookkeeping(
        model, backend, result.get("decode_tok_s_ring4000", result["decode_tok_s_ring0"]))
    # Cold replay of a long-lived session's stream against prefill of as many tokens.
    result.update(bench_replay(model, backend, 600 if quick else 2400, repeat))
    contended = bench_decode_contended(model, repeat, backend)
    result["decode_tok_s_contended"] = round(contended, 2)
    result["contended_vs_quiet"] = round(contended / result["decode_tok_s_ring0"], 3)
    result.update(bench_allocations(model, backend))
    # Resident memory with the model and one 4096-slot conversation (the ones the benchmarks
    # above made are gone); the snapshot benchmarks below hold several at once.
    result["rss_mb"] = round(rss_mb()[0], 1)
    result.update(run_snapshot_benchmarks(model, scratch, repeat, context, backend))
    result.update(run_chain_benchmarks(model, scratch, repeat, backend))
    result["rss_peak_mb"] = round(rss_mb()[1], 1)
    result["backend_info"] = backend.describe()  # after the runs: what it loaded and learned
    result["machine"] = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "blas": [
            {k: info.get(k) for k in ("internal_api", "version", "num_threads", "architecture")}
            for info in threadpool_info()
            if info.get("user_api") == "blas"
        ],
    }
    return result
