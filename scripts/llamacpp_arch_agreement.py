"""How llama.cpp agrees with HF transformers on each architecture fixture (tests/fixtures/arch).

Run it with a Python that has llama-cpp-python (the optional extra `llamacpp`):
    VENV/bin/python scripts/llamacpp_arch_agreement.py [--json]
For every fixture it feeds llama.cpp the reference input ids (the same 24 tokens transformers
saw), compares llama.cpp's argmax at every position with transformers' (reference.npz), and its
greedy continuation with transformers' greedy tokens, up to the first step where
transformers' own top two logits were closer than llama.cpp's 8-bit rounding can resolve
(`greedy_margin`). It prints one line per fixture, or one JSON object. This is the third
column of docs/models.md's fidelity table: the same bar Channel's ggml backend is held to.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import llama_cpp
import numpy as np

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "arch"
REL_TOLERANCE = 3e-2  # as tests/test_arch_reference.py's REL_GGML


def agreement(name: str, reference) -> dict:
    ids = [int(t) for t in reference[f"{name}/ids"]]
    llm = llama_cpp.Llama(str(FIXTURES / f"{name}.gguf"), n_ctx=256, logits_all=True,
                          verbose=False, n_threads=2)
    llm.eval(ids)
    logits = np.asarray(llm.scores[: len(ids)])
    argmax = float(np.mean(logits.argmax(axis=1) == reference[f"{name}/argmax"]))
    want = [int(t) for t in reference[f"{name}/greedy"]]
    margins = reference[f"{name}/greedy_margin"]
    tolerance = REL_TOLERANCE * float(np.abs(reference[f"{name}/subset_logits"]).max())
    llm.reset()
    got: list[int] = []
    llm.eval(ids)
    for _ in want:
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        got.append(token)
        llm.eval([token])
    same = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), len(want))
    explained = same == len(want) or float(margins[same]) < tolerance
    return {"argmax_agreement": round(argmax, 3), "greedy_same": f"{same}/{len(want)}",
            "parting_within_tolerance": explained}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    reference = np.load(FIXTURES / "reference.npz")
    index = json.loads((FIXTURES / "index.json").read_text())
    report = {"llama_cpp_python": llama_cpp.__version__,
              "fixtures": {name: agreement(name, reference) for name in sorted(index["fixtures"])}}
    if args.json:
        print(json.dumps(report))
        return
    for name, row in report["fixtures"].items():
        print(f"{name:<14} argmax {row['argmax_agreement']:.0%}  greedy {row['greedy_same']}"
              f"{'' if row['parting_within_tolerance'] else '  (parts beyond tolerance)'}")


if __name__ == "__main__":
    main()
