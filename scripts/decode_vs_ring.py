"""Decode speed against ring occupancy, for Channel's ggml backend and for llama.cpp.

Three steps, because the two engines live in different virtual environments:
    .venv/bin/python scripts/decode_vs_ring.py channel OUT_CHANNEL.json [--model PATH]
    VENV/bin/python scripts/decode_vs_ring.py llama OUT_LLAMA.json [--model PATH]
    VENV/bin/python scripts/decode_vs_ring.py plot OUT_CHANNEL.json OUT_LLAMA.json PNG
(VENV has llama-cpp-python, the `llamacpp` extra, and matplotlib.) Each measurement fills the
context to an occupancy with one prefill, takes one untimed decode step (Channel builds the
graph of a new context bucket there, as `channel bench` also leaves out), then times
DECODE_TOKENS decode steps on fixed tokens, REPEATS times, and keeps the median. Run it on an
otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

OCCUPANCY = (0, 512, 1024, 1536, 2048, 2560, 3072, 3584, 4000)
DECODE_TOKENS = 32
REPEATS = 3
N_CTX = 4096


def tokens(count: int, vocab: int, seed: int) -> list[int]:
    import numpy as np  # noqa: PLC0415 - both environments have it

    return [int(t) for t in np.random.default_rng(seed).integers(100, vocab - 100, count)]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure_channel(model: str | None, occupancy: tuple[int, ...],
                    repeats: int = REPEATS) -> dict[int, float]:
    from engine.backends.ggml.backend import GgmlBackend  # noqa: PLC0415
    from engine.conversation import Conversation  # noqa: PLC0415
    from engine.model.model import load_model  # noqa: PLC0415

    loaded = load_model(model, f32_weights=False)
    backend, vocab, out = GgmlBackend(), loaded.config.vocab_size, {}
    for fill in occupancy:
        runs = []
        for rep in range(repeats):
            conv = Conversation(loaded, backend=backend)
            conv.ingest(tokens(max(fill, 1), vocab, 1))
            warm_up, *steps = tokens(DECODE_TOKENS + 1, vocab, 2 + rep)
            conv.forward.decode_one_token(warm_up)
            start = time.perf_counter()
            for token in steps:
                conv.forward.decode_one_token(token)
            runs.append(time.perf_counter() - start)
        out[fill] = DECODE_TOKENS / statistics.median(runs)
        print(f"channel ring {fill}: {out[fill]:.1f} tok/s", file=sys.stderr)
    return out


def measure_llama(model: str | None, threads: int, occupancy: tuple[int, ...],
                  repeats: int = REPEATS) -> dict[int, float]:
    import llama_cpp  # noqa: PLC0415 - only in the llama.cpp environment
    from llamacpp_token_ids import default_model_path  # noqa: PLC0415 - sibling script

    llm = llama_cpp.Llama(model_path=str(model or default_model_path()), n_ctx=N_CTX,
                          n_threads=threads, n_threads_batch=threads, verbose=False)
    vocab, out = llm.n_vocab(), {}
    for fill in occupancy:
        runs = []
        for rep in range(repeats):
            llm.reset()
            llm.eval(tokens(max(fill, 1), vocab, 1))
            warm_up, *steps = tokens(DECODE_TOKENS + 1, vocab, 2 + rep)
            llm.eval([warm_up])
            start = time.perf_counter()
            for token in steps:
                llm.eval([token])
            runs.append(time.perf_counter() - start)
        out[fill] = DECODE_TOKENS / statistics.median(runs)
        print(f"llama.cpp ring {fill}: {out[fill]:.1f} tok/s", file=sys.stderr)
    return out


def plot(channel: Path, llama: Path, png: Path) -> None:
    import matplotlib  # noqa: PLC0415 - only for this step

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    for path, label in ((channel, "Channel (ggml backend)"), (llama, "llama.cpp")):
        data = json.loads(path.read_text())
        xs = sorted(int(k) for k in data["tok_s"])
        ax.plot(xs, [data["tok_s"][str(x)] for x in xs], marker="o", label=label)
    ax.set_xlabel("ring occupancy (slots holding K/V)")
    ax.set_ylabel("decode tokens / s")
    ax.set_title(f"Decode speed vs context, {data['model']}, {data['threads']} threads")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("channel", "llama", "plot"))
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--model", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--occupancy", type=int, nargs="+", default=list(OCCUPANCY))
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args = parser.parse_args()
    if args.mode == "plot":
        plot(*args.paths[:3])
        return
    occupancy = tuple(args.occupancy)
    result = (measure_channel(args.model, occupancy, args.repeats) if args.mode == "channel"
              else measure_llama(args.model, args.threads, occupancy, args.repeats))
    model = Path(args.model).name if args.model else "SmolLM2-135M-Instruct.Q4_1.gguf"
    # Resident memory with the model and one context (Channel: one 4096-slot ring).
    args.paths[0].write_text(json.dumps({"engine": args.mode, "model": model,
                                         "threads": args.threads, "tok_s": result,
                                         "rss_mb": round(rss_mb(), 1)}) + "\n")


if __name__ == "__main__":
    main()
