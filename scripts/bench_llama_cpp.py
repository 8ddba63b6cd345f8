"""The llama.cpp side of Channel's benchmarks, on the same GGUF and the same machine.

Run it with a Python that has llama-cpp-python (an optional extra; it builds from source):
    VENV/bin/python scripts/bench_llama_cpp.py --json [--channel-json FILE]
It prints one JSON object whose metric keys match `channel bench --json`; given that output,
it adds `ratios` (channel / llama.cpp per metric, reading Channel's snapshot_* and
cold_replay_ms as the state_* and cold-prefill figures). Progress goes to stderr.
Run it on an otherwise idle machine: llama.cpp's threads spin-wait on each other, and one
busy core can cut its decode speed twentyfold (`machine.loadavg_1m` records the load).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import llama_cpp  # only in the llama.cpp venv, never the project's
import numpy as np
from llamacpp_token_ids import default_model_path  # sibling script; scripts/ is sys.path[0]

N_CTX = 4096  # the same context as Channel's default ring of 4096 slots (RSS compares fairly)
REPS = 3
PREFILL_TOKENS = 2048
COLD_TOKENS = 4000
DECODE_TOKENS = 64
RINGS = (0, 2048, 4000)
METRICS = (
    "prefill_tok_s",
    *(f"decode_tok_s_ring{n}" for n in RINGS),
    "cold_prefill_4000_s",
    "state_save_ms",
    "state_load_ms",
    "state_bytes",
    "decode_tok_s_contended",
    "rss_mb",
)

# Ordinary prose, repeated: the numbers depend on token count, not on what the tokens say.
FILLER = (
    "The ring keeps the conversation's keys and values in fixed slots. When it fills up, the "
    "least salient slots outside the recent window are evicted, and the system prompt stays "
    "pinned. Snapshots let a restarted app resume without re-reading the whole history.\n"
)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def synthetic_tokens(llm: llama_cpp.Llama, count: int) -> list[int]:
    """`count` real token ids made by tokenizing repeated prose with llama.cpp itself."""
    one = llm.tokenize(FILLER.encode("utf-8"), add_bos=False, special=False)
    repeats = count // len(one) + 2
    ids = llm.tokenize((FILLER * repeats).encode("utf-8"), add_bos=False, special=False)
    return list(ids[:count])


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def greedy_next(llm: llama_cpp.Llama) -> int:
    # Llama.eval no longer copies logits unless logits_all; read the last output row directly.
    logits = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return int(np.ctypeslib.as_array(logits, shape=(llm.n_vocab(),)).argmax())


def decode_greedy(llm: llama_cpp.Llama, count: int) -> float:
    """Seconds for `count` single-token decode steps from the current KV cache."""
    token = greedy_next(llm)
    start = time.perf_counter()
    for _ in range(count):
        llm.eval([token])
        token = greedy_next(llm)
    return time.perf_counter() - start


def save_state(llm: llama_cpp.Llama, path: str) -> None:
    tokens = llm.input_ids[: llm.n_tokens].tolist()
    array = (llama_cpp.llama_token * len(tokens))(*tokens)
    if not llama_cpp.llama_state_save_file(llm.ctx, path.encode(), array, len(tokens)):
        raise RuntimeError("llama_state_save_file failed")


def load_state(llm: llama_cpp.Llama, path: str) -> None:
    capacity = N_CTX
    array = (llama_cpp.llama_token * capacity)()
    count = ctypes.c_size_t(0)
    ok = llama_cpp.llama_state_load_file(
        llm.ctx, path.encode(), array, capacity, ctypes.byref(count)
    )
    if not ok:
        raise RuntimeError("llama_state_load_file failed")
    # The Python wrapper tracks its own token list; keep it in step with the restored cache.
    llm.n_tokens = count.value
    llm.input_ids[: count.value] = array[: count.value]


def run_ring(
    llm: llama_cpp.Llama, tokens: list[int], ring: int, state_path: str, out: dict
) -> None:
    """One repetition: prefill `ring` tokens (timed), maybe save/load state, decode 64."""
    llm.reset()
    if ring == 0:
        llm.eval(tokens[:1])  # decoding needs one token's logits to start from
    else:
        out.setdefault(f"prefill_{ring}", []).append(timed(lambda: llm.eval(tokens[:ring])))
    if ring == COLD_TOKENS:
        expected = greedy_next(llm)
        out.setdefault("save", []).append(timed(lambda: save_state(llm, state_path)))
        out["state_bytes"] = os.path.getsize(state_path)
        out.setdefault("load", []).append(timed(lambda: load_state(llm, state_path)))
        os.remove(state_path)
        if greedy_next(llm) != expected:  # a restore that loses state would skew decode too
            log("warning: the greedy next token changed across state save/load")
    out.setdefault(f"decode_{ring}", []).append(decode_greedy(llm, DECODE_TOKENS))


def bench(model: str, n_threads: int, state_dir: str) -> dict:
    llm = llama_cpp.Llama(
        model_path=model,
        n_ctx=N_CTX,
        n_threads=n_threads,
        n_threads_batch=n_threads,
        verbose=False,
    )
    tokens = synthetic_tokens(llm, max(RINGS + (PREFILL_TOKENS, COLD_TOKENS)))
    state_path = os.path.join(state_dir, "llama_state.bin")
    raw: dict = {}
    for ring in RINGS:
        for rep in range(REPS):
            log(f"ring {ring}: repetition {rep + 1}/{REPS}")
            run_ring(llm, tokens, ring, state_path, raw)
    for rep in range(REPS):
        log(f"decode beside a busy process: repetition {rep + 1}/{REPS}")
        llm.reset()
        llm.eval(tokens[:1])
        busy = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL)  # one core, spinning
        try:
            raw.setdefault("decode_contended", []).append(decode_greedy(llm, DECODE_TOKENS))
        finally:
            busy.kill()
            busy.wait()
    med = statistics.median
    result = {
        # The ring-2048 and ring-4000 runs start with exactly these prefills; reuse them.
        "prefill_tok_s": PREFILL_TOKENS / med(raw[f"prefill_{PREFILL_TOKENS}"]),
        **{f"decode_tok_s_ring{n}": DECODE_TOKENS / med(raw[f"decode_{n}"]) for n in RINGS},
        "cold_prefill_4000_s": med(raw[f"prefill_{COLD_TOKENS}"]),
        "state_save_ms": 1000 * med(raw["save"]),
        "state_load_ms": 1000 * med(raw["load"]),
        "state_bytes": raw["state_bytes"],
        "decode_tok_s_contended": DECODE_TOKENS / med(raw["decode_contended"]),
        # Model and one context of N_CTX, like `channel bench`'s rss_mb (model + one ring).
        "rss_mb": rss_mb(),
    }
    result = {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}
    result.update(
        llama_cpp_python=llama_cpp.__version__,
        n_threads=n_threads,
        n_ctx=N_CTX,
        n_batch=llm.n_batch,
        model=os.path.basename(model),
        machine=machine_info(),
        # Every repetition's seconds, so a run disturbed by other work shows as spread.
        runs_s={k: [round(x, 4) for x in v] for k, v in raw.items() if isinstance(v, list)},
    )
    return result


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def machine_info() -> dict:
    processor = platform.processor()
    if not processor and os.path.exists("/proc/cpuinfo"):
        # platform.processor() is empty on most Linux builds; cpuinfo has the model name.
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                processor = line.split(":", 1)[1].strip()
                break
    return {
        "processor": processor,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


# Where `channel bench --json` reports a figure under its own name: key -> (its key, scale).
# Channel's cold boot replays the 4000-token conversation, which is llama.cpp's cold prefill.
CHANNEL_ALIASES = {
    "state_save_ms": ("snapshot_save_ms", 1.0),
    "state_load_ms": ("snapshot_restore_ms", 1.0),
    "state_bytes": ("snapshot_bytes", 1.0),
    "cold_prefill_4000_s": ("cold_replay_ms", 1e-3),
}


def channel_figure(channel: dict, key: str) -> float | None:
    value = channel.get(key)
    if value is None and key in CHANNEL_ALIASES:
        alias, scale = CHANNEL_ALIASES[key]
        value = channel.get(alias)
        value = value * scale if isinstance(value, (int, float)) else None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def ratios(channel: dict, llama: dict) -> dict:
    """channel / llama.cpp for every metric both report (for tok/s, above 1 is faster)."""
    out = {}
    for key in METRICS:
        mine = channel_figure(channel, key)
        if mine is not None and llama.get(key):
            out[key] = round(mine / llama[key], 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print compact JSON only")
    parser.add_argument("--channel-json", type=Path, help="`channel bench --json` output")
    parser.add_argument("--model", default=None, help="GGUF path (default: the shipped one)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--state-dir", default=None, help="where the state file is written")
    args = parser.parse_args()

    channel = json.loads(args.channel_json.read_text()) if args.channel_json else None
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(dir=args.state_dir) as state_dir:
        result = bench(args.model or default_model_path(), args.threads, state_dir)
    # llama.cpp's threads spin-wait for each other, so a busy machine ruins decode figures;
    # the load averages say whether this run had the cores to itself.
    result["machine"]["loadavg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    if channel is not None:
        result["ratios"] = ratios(channel, result)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
