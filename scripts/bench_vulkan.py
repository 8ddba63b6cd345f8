"""Channel's Vulkan backend against its CPU backends, HF transformers and llama.cpp: one JSON
benchmark.

    python scripts/bench_vulkan.py [--quick] [--hf] [--llama-bench PATH] [--out FILE]
                                   [--markdown FILE] [--backends vulkan,ggml] [--model GGUF]
    python scripts/bench_vulkan.py --from-json FILE [--markdown FILE]   # re-render the table

Figures (medians of --repeat runs): prefill tok/s at each --prefill length, decode tok/s at
each --contexts length, snapshot save/restore (scripts/bench_vulkan_engine.py says how each is
taken). Each engine backend and HF run in their own subprocess, so resident memory is that
backend's alone and one's threads never compete with another's. --hf adds HF transformers on
CUDA (bf16, static cache + torch.compile; --hf-eager also fp32 eager): bench_vulkan_hf.py.
--llama-bench PATH adds llama.cpp from its `llama-bench` (fa off and on): bench_vulkan_llama.py;
--llama-bench-json FILE reads a saved run of it instead. --markdown writes the table that
docs/vulkan.md carries (bench_vulkan_table.py). --quick: tiny sizes, for lavapipe.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import bench_vulkan_llama as llama  # noqa: E402 - a sibling; scripts/ is sys.path[0]
from bench_vulkan_table import markdown  # noqa: E402

# Decode runs as many steps as llama-bench's tg test (-n), where the ring has room.
FULL = {"prefill": "256,2048", "contexts": "16,2000,4000", "decode_tokens": llama.GEN_TOKENS,
        "repeat": 5}
QUICK = {"prefill": "64", "contexts": "16,128", "decode_tokens": 8, "repeat": 1}
KINDS = ("vulkan", "ggml", "numpy", "hf", "hf-eager")


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def child(kind: str, args: argparse.Namespace) -> dict:
    if kind in ("hf", "hf-eager"):
        from bench_vulkan_hf import bench as hf_bench

        mode = "bf16-compiled" if kind == "hf" else "fp32-eager"
        return hf_bench(args.model, mode, args.prefill, args.contexts, args.repeat)
    from bench_vulkan_engine import bench as engine_bench

    tuning = json.loads(args.tuning_json.read_text()) if args.tuning_json else None
    return engine_bench(kind, args.model, args.cache_dir, args.scratch, args.prefill,
                        args.contexts, args.decode_tokens, args.repeat, tuning)


def run_child(kind: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--model", str(args.model),
           "--cache-dir", str(args.cache_dir), "--scratch", str(args.scratch),
           "--prefill", ",".join(map(str, args.prefill)),
           "--contexts", ",".join(map(str, args.contexts)),
           "--decode-tokens", str(args.decode_tokens), "--repeat", str(args.repeat),
           *(["--tuning-json", str(args.tuning_json)] if args.tuning_json else [])]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"backend": kind, "error": f"timed out after {args.timeout} s"}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"backend": kind, "error": " | ".join(tail)}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    return result


def llama_column(args: argparse.Namespace) -> dict:
    try:
        if args.llama_bench_json:
            saved = json.loads(args.llama_bench_json.read_text())
            # llama-bench's own output, or an earlier report of this bench that ran it.
            records = saved["llama_cpp"]["records"] if isinstance(saved, dict) else saved
        else:
            gen = llama.GEN_TOKENS if not args.quick else args.decode_tokens
            records = llama.run(args.llama_bench, args.model, args.prefill, args.contexts,
                                args.repeat, args.timeout, gen)
    except (OSError, ValueError, KeyError, RuntimeError, subprocess.TimeoutExpired) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return llama.summarise(records, args.contexts) | {"records": records}


def machine() -> dict:
    info: dict = {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                  "python": platform.python_version()}
    if shutil.which("nvidia-smi"):
        proc = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True)
        if proc.returncode == 0 and proc.stdout.strip():
            info["gpu"], _, info["driver"] = proc.stdout.splitlines()[0].partition(", ")
    try:
        from engine.backends.vulkan import probe

        device = probe()
        info["vulkan"] = device if isinstance(device, str) else device.as_dict()
    except Exception as exc:  # report, don't fail the benchmark
        info["vulkan"] = f"{type(exc).__name__}: {exc}"
    return info


def ratios(report: dict) -> dict:
    """Vulkan over each other column, per figure (None where either side is missing)."""
    vk = report.get("vulkan", {})
    others = {"ggml": report.get("ggml", {}), "numpy": report.get("numpy", {}),
              "hf": report.get("hf", {}),
              "llama_fa_off": report.get("llama_cpp", {}).get("fa_off", {}),
              "llama_fa_on": report.get("llama_cpp", {}).get("fa_on", {})}
    out: dict = {}
    for name, other in others.items():
        for kind in ("prefill", "decode"):
            for key, value in vk.get(f"{kind}_tok_s", {}).items():
                theirs = other.get(f"{kind}_tok_s", {}).get(key)
                out[f"{kind}_{key}_vulkan_over_{name}"] = (
                    round(value / theirs, 3) if theirs else None)
    np_ = others["numpy"]
    for key in ("decode_cpu_ms_per_token", "rss_decoding_mb", "rss_mb", "rss_peak_mb"):
        if key in vk and np_.get(key):
            out[f"{key}_vulkan_over_numpy"] = round(vk[key] / np_[key], 3)
    return out


def record_speed(report: dict, cache_dir: Path) -> None:
    """Lets `--backend auto` decide on this device: the short-context decode of Vulkan and of
    each CPU backend the report measured (`auto` compares with the one it would take)."""
    short = str(min(report["settings"]["contexts"]))
    speeds = {kind: report[kind]["decode_tok_s"][short] for kind in ("vulkan", "ggml", "numpy")
              if short in report.get(kind, {}).get("decode_tok_s", {})}
    if "vulkan" not in speeds or len(speeds) < 2:
        return
    from engine.backends.vulkan import probe
    from engine.backends.vulkan.measurements import record_measurement

    info = probe()
    if not isinstance(info, str):
        record_measurement(cache_dir, info, report["vulkan"]["model_fingerprint"], speeds)


def save(report: dict, path: Path | None) -> str:
    text = json.dumps(report, indent=1)
    if path:
        path.write_text(text + "\n")
    return text


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=None)
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="the app's cache (default): `--backend auto` reads the result there")
    p.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--hf", action="store_true", help="HF transformers bf16 + compile (CUDA)")
    p.add_argument("--hf-eager", action="store_true", help="HF transformers fp32 eager (CUDA)")
    p.add_argument("--llama-bench", type=Path, help="a llama-bench binary (CUDA build)")
    p.add_argument("--llama-bench-json", type=Path,
                   help="a saved `llama-bench -o json` run, or a report of this bench with one")
    p.add_argument("--backends", default="vulkan,ggml", help="engine columns, of "
                   "vulkan, ggml and numpy (ggml is what `auto` takes on a CPU)")
    p.add_argument("--prefill", help=f"prompt lengths (default {FULL['prefill']})")
    p.add_argument("--contexts", help=f"decode contexts (default {FULL['contexts']})")
    p.add_argument("--decode-tokens", type=int, help="decode steps per timed run")
    p.add_argument("--repeat", type=int)
    p.add_argument("--timeout", type=int, default=900, help="seconds per child / llama-bench")
    p.add_argument("--tuning-json", type=Path, help="Vulkan tuning knobs to override, as a "
                   "JSON object of Tuning fields (scripts/device/pick_tuning.py writes one)")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    p.add_argument("--markdown", type=Path, help="write the docs/vulkan.md table here")
    p.add_argument("--from-json", type=Path, help="render an earlier --out report; run nothing")
    p.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    args = p.parse_args()
    defaults = QUICK if args.quick else FULL
    args.prefill = ints(args.prefill or defaults["prefill"])
    args.contexts = ints(args.contexts or defaults["contexts"])
    args.decode_tokens = args.decode_tokens or defaults["decode_tokens"]
    args.repeat = args.repeat or defaults["repeat"]
    if args.model is None and not args.from_json:
        from engine.paths import default_model_path

        args.model = default_model_path()
    if args.cache_dir is None and not args.from_json:
        from engine.paths import default_cache_dir

        args.cache_dir = default_cache_dir()
    return args


def main() -> int:
    args = parse_args()
    if args.child:
        print(json.dumps(child(args.child, args)))
        return 0
    if args.from_json:
        report = json.loads(args.from_json.read_text())
    else:
        report = {"benchmark": "vulkan", "date": time.strftime("%Y-%m-%d"),
                  "quick": args.quick, "model": str(args.model), "machine": machine(),
                  "settings": {k: getattr(args, k) for k in
                               ("prefill", "contexts", "decode_tokens", "repeat")}}
        kinds = [b for b in args.backends.split(",") if b]
        kinds += ["hf"] * args.hf + ["hf-eager"] * args.hf_eager
        for kind in kinds:
            report[kind] = run_child(kind, args)
            print(f"{kind}: {json.dumps(report[kind])}", file=sys.stderr, flush=True)
            save(report, args.out)  # a run cut short still leaves what it finished
        if args.llama_bench or args.llama_bench_json:
            report["llama_cpp"] = llama_column(args)
            summary = {k: v for k, v in report["llama_cpp"].items() if k != "records"}
            print(f"llama_cpp: {json.dumps(summary)}", file=sys.stderr, flush=True)
        report["ratios"] = ratios(report)
        record_speed(report, args.cache_dir)
        print(save(report, args.out))
    table = markdown(report)
    if args.markdown:
        args.markdown.write_text(table)
    print(table, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
