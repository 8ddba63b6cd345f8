"""Writes tests/fixtures/llamacpp_reference.json: what llama.cpp computes on the shipped GGUF.

The ggml backend quantizes activations exactly as llama.cpp does, so its fidelity bar is
llama.cpp's own (tests/test_ggml_real.py): top-1 agreement with the f32 reference at least as
high as llama.cpp's on the same tokens, and the same greedy replies. Run it with a Python that
has llama-cpp-python (the optional extra `llamacpp`; it is not a project dependency):
    VENV/bin/python scripts/llamacpp_reference.py [--model PATH]
Recorded: for the first TOKENS tokens of engine/tools/data/licences.txt, the token ids and
llama.cpp's argmax at every position; for a few chat prompts (rendered with the GGUF's own chat
template), the prompt ids and llama.cpp's greedy continuation.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jinja2
import llama_cpp
import numpy as np
from llamacpp_token_ids import default_model_path  # sibling script; scripts/ is sys.path[0]

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "fixtures" / "llamacpp_reference.json"
TEXT = REPO / "engine" / "tools" / "data" / "licences.txt"
TOKENS = 1024
NEW_TOKENS = 16
QUESTIONS = [
    "What is the capital of France?",
    "Name three primary colors.",
    "Write a haiku about the sea.",
    "What is 12 times 12?",
]


def greedy(llm: llama_cpp.Llama, prompt: list[int]) -> list[int]:
    llm.reset()
    llm.eval(prompt)
    out: list[int] = []
    for _ in range(NEW_TOKENS):
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(token)
        llm.eval([token])  # like tests/test_fidelity.py, an end-of-turn token is fed on too
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    args = parser.parse_args()
    path = Path(args.model or default_model_path())
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=2048, n_threads=2, logits_all=True,
                          verbose=False)
    ids = llm.tokenize(TEXT.read_text(encoding="utf-8").encode(), add_bos=False,
                       special=True)[:TOKENS]
    llm.eval(ids)
    argmax = np.asarray(llm.scores[: len(ids)]).argmax(axis=1)
    template = jinja2.Environment().from_string(llm.metadata["tokenizer.chat_template"])
    chats = []
    for question in QUESTIONS:
        messages = [{"role": "user", "content": question}]
        text = template.render(messages=messages, add_generation_prompt=True)
        prompt = llm.tokenize(text.encode(), add_bos=False, special=True)
        chats.append({"messages": messages, "prompt_ids": prompt,
                      "generated_ids": greedy(llm, prompt)})
    OUT.write_text(json.dumps({
        "llama_cpp_python": llama_cpp.__version__,
        "gguf_size_bytes": path.stat().st_size,
        "long_text": {"ids": ids, "argmax": argmax.tolist()},
        "greedy": {"new_tokens": NEW_TOKENS, "chats": chats},
    }) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
