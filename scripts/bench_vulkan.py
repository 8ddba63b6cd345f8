"""Vulkan vs numpy (and, on a GPU, HF transformers eager): one JSON benchmark.

    python scripts/bench_vulkan.py [--quick] [--hf] [--out FILE] [--model GGUF]

Each backend runs in its own subprocess, so resident memory (VmRSS/VmHWM) is that backend's
alone and OpenBLAS threads of one never compete with lavapipe's of the other. Figures: model
and conversation setup, prefill tok/s, decode tok/s (the bare decode step, and the app's
generate() loop that samples from the logits), decode at a long context, and the snapshot
path's arena I/O (active K/V slabs written from and read back into the mapped arena views).
With --hf, HF transformers loads the same GGUF (float32, eager attention) on CUDA.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def rss_mb() -> dict:
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    mb = lambda k: round(int(fields.get(k, "0 kB").split()[0]) / 1024, 1)  # noqa: E731
    return {"rss_mb": mb("VmRSS"), "rss_peak_mb": mb("VmHWM")}


def cpu_s() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def synthetic(vocab: int, count: int, seed: int) -> list[int]:
    from engine.tools.bench import synthetic_tokens

    return synthetic_tokens(vocab, count, seed)


def timed(fn, repeat: int) -> float:
    from engine.tools.bench import median_time

    return median_time(fn, repeat)


# -- engine backends -------------------------------------------------------------------------
def child_engine(backend_name: str, args: argparse.Namespace) -> dict:
    import numpy as np

    from engine.model.config import RingPolicy
    from engine.model.model import load_model
    from engine.state.conversation import Conversation
    from engine.state.sampler import SamplingSettings

    out: dict = {"backend": backend_name}
    t0 = time.perf_counter()
    model = load_model(args.model, args.cache_dir, f32_weights=backend_name == "numpy")
    out["model_load_s"] = round(time.perf_counter() - t0, 3)
    backend = None
    if backend_name == "vulkan":
        from engine.backends.vulkan.backend import VulkanBackend

        backend = VulkanBackend()
    policy = RingPolicy()
    t0 = time.perf_counter()
    conv = Conversation(model, policy, backend=backend)
    out["first_conversation_s"] = round(time.perf_counter() - t0, 3)  # vulkan: weight upload
    vocab = model.config.vocab_size

    n_prefill = args.prefill_tokens
    ids = synthetic(vocab, n_prefill, 0)
    conv.ingest(ids)  # warm-up: records/compiles every prefill pass shape
    out["prefill_tokens"] = n_prefill
    out["prefill_tok_s"] = round(n_prefill / timed(
        lambda: Conversation(model, policy, backend=backend).ingest(ids), args.repeat), 2)

    conv = Conversation(model, policy, backend=backend)
    conv.ingest(synthetic(vocab, 16, 1))
    steps = iter(synthetic(vocab, args.decode_tokens * (args.repeat + 1) + 8, 2))
    for _ in range(4):
        conv.forward.decode_one_token(next(steps))

    def decode() -> None:
        for _ in range(args.decode_tokens):
            conv.forward.decode_one_token(next(steps))

    out["decode_tokens"] = args.decode_tokens
    cpu0 = cpu_s()
    out["decode_tok_s"] = round(args.decode_tokens / timed(decode, args.repeat), 2)
    # CPU seconds (all threads) per token: robust to other load on a shared machine, where
    # wall-clock tok/s is not.
    out["decode_cpu_ms_per_token"] = round(
        (cpu_s() - cpu0) * 1e3 / (args.decode_tokens * args.repeat), 2)
    # Steady state of one decoding conversation: collect the prefill ones first (an arena and
    # its views form a reference cycle, so they wait for the cyclic collector).
    gc.collect()
    out["rss_decoding_mb"] = rss_mb()["rss_mb"]
    gen = Conversation(model, policy, backend=backend)
    gen.ingest(synthetic(vocab, 16, 3))
    result = gen.generate(SamplingSettings(), args.decode_tokens, frozenset())
    out["generate_tok_s"] = round(result.tok_s, 2)  # decode + greedy sampling from logits

    if args.long_context:
        long = Conversation(model, policy, backend=backend)
        long.ingest(synthetic(vocab, args.long_context, 4))
        more = iter(synthetic(vocab, 64, 5))
        long.forward.decode_one_token(next(more))
        n = 16
        out[f"decode_tok_s_ctx{args.long_context}"] = round(n / timed(
            lambda: [long.forward.decode_one_token(next(more)) for _ in range(n)], 1), 2)
        conv = long
    out.update(snapshot_io(conv, Path(args.scratch)))
    out["arena_bytes"] = conv.arena.nbytes
    if backend is not None:
        out["device"] = backend.describe()
        out["dispatches_per_token"] = conv.forward.dispatches_per_token
    out["model_fingerprint"] = model.fingerprint
    out.update(rss_mb())
    del np
    return out


def snapshot_io(conv, scratch: Path) -> dict:
    """Write the live K/V slabs and slot metadata straight from the arena views (1 MiB
    buffered, fsync), then read them back into the views: the snapshot path's data movement."""
    import numpy as np

    v, n = conv.arena.views(), conv.ring.n_active
    path = scratch / f"arena-{os.getpid()}.bin"
    names = ["k_cache", "v_cache", "slot_clock", "slot_pos", "slot_active", "slot_salience"]
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
    save_s = time.perf_counter() - t0
    nbytes = path.stat().st_size
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        for plane in (v.k_cache, v.v_cache):
            for layer in plane:
                f.readinto(memoryview(layer[:n]).cast("B"))
        for meta in (v.slot_clock, v.slot_pos, v.slot_active, v.slot_salience):
            f.readinto(memoryview(meta[:n]).cast("B"))
    restore_s = time.perf_counter() - t0
    path.unlink()
    return {"snapshot_path": getattr(conv.forward, "snapshot_path", "mapped"),
            "snapshot_slots": n, "snapshot_bytes": nbytes,
            "snapshot_save_ms": round(save_s * 1e3, 2),
            "snapshot_restore_ms": round(restore_s * 1e3, 2)}


# -- HF transformers on CUDA -----------------------------------------------------------------
def child_hf(args: argparse.Namespace) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM

    if not torch.cuda.is_available():
        return {"backend": "hf", "skipped": "no CUDA device"}
    gguf = Path(args.model)
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32,
        attn_implementation="eager").to("cuda").eval()
    out: dict = {"backend": "hf", "model_load_s": round(time.perf_counter() - t0, 3),
                 "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
                 "dtype": "float32", "attn_implementation": "eager"}
    vocab = model.config.vocab_size
    ids = torch.tensor([synthetic(vocab, args.prefill_tokens, 0)], device="cuda")

    @torch.no_grad()
    def prefill():
        model(input_ids=ids, use_cache=True)
        torch.cuda.synchronize()

    prefill()
    out["prefill_tokens"] = args.prefill_tokens
    out["prefill_tok_s"] = round(args.prefill_tokens / timed(prefill, args.repeat), 2)

    @torch.no_grad()
    def decode(context: int, n: int) -> float:
        prompt = torch.tensor([synthetic(vocab, context, 1)], device="cuda")
        res = model(input_ids=prompt, use_cache=True)
        cache, tok = res.past_key_values, res.logits[:, -1].argmax(-1, keepdim=True)
        for _ in range(4):  # warm-up
            res = model(input_ids=tok, past_key_values=cache, use_cache=True)
            cache, tok = res.past_key_values, res.logits[:, -1].argmax(-1, keepdim=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            res = model(input_ids=tok, past_key_values=cache, use_cache=True)
            cache = res.past_key_values
            tok = res.logits[:, -1].argmax(-1, keepdim=True)
            int(tok)  # a chat app needs the token on the host every step
        return n / (time.perf_counter() - t0)

    out["decode_tokens"] = args.decode_tokens
    out["decode_tok_s"] = round(statistics.median(
        decode(16, args.decode_tokens) for _ in range(args.repeat)), 2)
    if args.long_context:
        out[f"decode_tok_s_ctx{args.long_context}"] = round(decode(args.long_context, 16), 2)
    return out


# -- parent ----------------------------------------------------------------------------------
def run_child(kind: str, args: argparse.Namespace, timeout: int) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--model", str(args.model),
           "--cache-dir", str(args.cache_dir), "--scratch", str(args.scratch),
           "--prefill-tokens", str(args.prefill_tokens), "--decode-tokens",
           str(args.decode_tokens), "--repeat", str(args.repeat),
           "--long-context", str(args.long_context)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"backend": kind, "error": f"timed out after {timeout} s"}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"backend": kind, "error": " | ".join(tail)}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    return result


def machine() -> dict:
    info: dict = {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                  "python": platform.python_version()}
    try:
        from engine.backends.vulkan import probe

        device = probe()
        info["vulkan"] = device if isinstance(device, str) else device.as_dict()
    except Exception as exc:  # report, don't fail the benchmark
        info["vulkan"] = f"{type(exc).__name__}: {exc}"
    return info


def ratio(a: dict, b: dict, key: str) -> float | None:
    if key in a and key in b and b[key]:
        return round(a[key] / b[key], 3)
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=None)
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="the app's cache (default): `--backend auto` reads the result there")
    p.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--hf", action="store_true", help="also HF transformers eager (CUDA)")
    p.add_argument("--backends", default="vulkan,numpy")
    p.add_argument("--prefill-tokens", type=int, default=None)
    p.add_argument("--decode-tokens", type=int, default=None)
    p.add_argument("--repeat", type=int, default=None)
    p.add_argument("--long-context", type=int, default=None)
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--child", choices=("vulkan", "numpy", "hf"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.model is None:
        from engine.paths import default_model_path

        args.model = default_model_path()
    if args.cache_dir is None:
        from engine.paths import default_cache_dir

        args.cache_dir = default_cache_dir()
    args.prefill_tokens = args.prefill_tokens or (64 if args.quick else 256)
    args.decode_tokens = args.decode_tokens or (16 if args.quick else 64)
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.long_context = 0 if args.long_context is None else args.long_context
    if args.child:
        result = child_hf(args) if args.child == "hf" else child_engine(args.child, args)
        print(json.dumps(result))
        return 0

    report: dict = {"benchmark": "vulkan", "quick": args.quick, "machine": machine(),
                    "settings": {k: getattr(args, k) for k in
                                 ("prefill_tokens", "decode_tokens", "repeat", "long_context")}}
    for kind in [b for b in args.backends.split(",") if b] + (["hf"] if args.hf else []):
        report[kind] = run_child(kind, args, args.timeout)
        print(f"{kind}: {json.dumps(report[kind])}", file=sys.stderr, flush=True)
    vk, np_, hf = report.get("vulkan", {}), report.get("numpy", {}), report.get("hf", {})
    report["ratios"] = {
        "decode_vulkan_over_numpy": ratio(vk, np_, "decode_tok_s"),
        "prefill_vulkan_over_numpy": ratio(vk, np_, "prefill_tok_s"),
        "decode_cpu_per_token_numpy_over_vulkan": ratio(np_, vk, "decode_cpu_ms_per_token"),
        "rss_decoding_vulkan_over_numpy": ratio(vk, np_, "rss_decoding_mb"),
        "rss_vulkan_over_numpy": ratio(vk, np_, "rss_mb"),
        "rss_peak_vulkan_over_numpy": ratio(vk, np_, "rss_peak_mb"),
        "decode_vulkan_over_hf": ratio(vk, hf, "decode_tok_s"),
        "prefill_vulkan_over_hf": ratio(vk, hf, "prefill_tok_s"),
    }
    if "decode_tok_s" in vk and "decode_tok_s" in np_:
        from engine.backends.vulkan import probe
        from engine.backends.vulkan.measurements import record_measurement

        info = probe()
        if not isinstance(info, str):  # lets `--backend auto` decide on this device
            record_measurement(args.cache_dir, info, vk["model_fingerprint"],
                               vk["decode_tok_s"], np_["decode_tok_s"])
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
