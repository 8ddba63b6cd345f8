"""Writes tests/fixtures/vocab/*.gguf: small vocab-only GGUFs, one per tokenizer kind.

    python scripts/make_vocab_fixtures.py [--llama-cpp DIR] [--out DIR]

Each comes from one of llama.cpp's own vocab test files (DIR/models/ggml-vocab-*.gguf; DIR is
the llama.cpp tree, e.g. vendor/llama.cpp of the llama-cpp-python sdist), pruned to a few
thousand tokens but kept self-consistent, so llama.cpp and engine/model/tokenizer.py can both
load it and must agree on every id (scripts/llamacpp_token_ids.py, tests/test_tokenizer_kinds.py):
- every byte token (byte-level alphabet or `<0xNN>`) and every control, user-defined and unknown
  token is kept, so any text still encodes and the chat markers stay special;
- byte-level BPE: the most frequent merges (the first in rank order) whose parts are already
  kept, and then every merge whose two parts and result are all kept;
- SentencePiece: the best-scoring tokens, plus each single character they are made of (llama.cpp
  can merge a character that is not a token; HF's BPE cannot, so the pruned vocabulary must not
  create such characters).
Every `tokenizer.*` key is copied (ids renumbered), `general.name` too (llama.cpp reads Phi-3's
whitespace rule from it), and `general.architecture` names the model family the tokenizer
belongs to; there are no tensors. Llama 3's vocab file has no chat template, so llama.cpp's copy
of Llama 3.1's is added.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gguf
from gguf import GGUFValueType, GGUFWriter

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "fixtures" / "vocab"
DEFAULT_LLAMA_CPP = Path("/tmp/sdist/llama_cpp_python-0.3.36/vendor/llama.cpp")

# fixture name -> (source vocab, architecture, normal tokens to keep, chat template to add)
KINDS: dict[str, tuple[str, str, int, str | None]] = {
    "llama-bpe": ("ggml-vocab-llama-bpe.gguf", "llama", 4000,
                  "meta-llama-Llama-3.1-8B-Instruct.jinja"),
    "qwen2": ("ggml-vocab-qwen2.gguf", "qwen2", 4000, None),
    "llama-spm": ("ggml-vocab-llama-spm.gguf", "llama", 5000, None),
    "phi-3": ("ggml-vocab-phi-3.gguf", "phi3", 5000, None),
}
NORMAL, BYTE = 1, 6
LISTS = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores",
         "tokenizer.ggml.merges")


def byte_level_alphabet() -> set[str]:
    """GPT-2's printable stand-ins for the 256 byte values."""
    from tokenizers import pre_tokenizers

    return set(pre_tokenizers.ByteLevel.alphabet())


def prune_bpe(tokens: list[str], types: list[int], merges: list[str], budget: int) -> set[int]:
    """Ids to keep: specials, the byte alphabet, and the results of the top merges."""
    text_to_id = {tok: i for i, tok in enumerate(tokens)}
    keep = {i for i, kind in enumerate(types) if kind != NORMAL}
    keep |= {text_to_id[ch] for ch in byte_level_alphabet() if ch in text_to_id}
    kept_text = {tokens[i] for i in keep}
    added = 0
    for merge in merges:
        if added >= budget:
            break
        left, right = merge.split(" ", 1)
        result = text_to_id.get(left + right)
        if left in kept_text and right in kept_text and result is not None and (
            result not in keep
        ):
            keep.add(result)
            kept_text.add(tokens[result])
            added += 1
    return keep


def prune_spm(tokens: list[str], types: list[int], scores: list[float], budget: int) -> set[int]:
    """Ids to keep: every non-normal token, the best-scoring normal ones and their chars."""
    text_to_id = {tok: i for i, tok in enumerate(tokens)}
    keep = {i for i, kind in enumerate(types) if kind != NORMAL}
    normal = sorted((i for i, kind in enumerate(types) if kind == NORMAL),
                    key=lambda i: (-scores[i], i))
    keep |= set(normal[:budget])
    for i in list(keep):
        if types[i] == NORMAL:
            for ch in tokens[i]:
                if ch not in text_to_id:
                    raise SystemExit(f"token {tokens[i]!r} uses {ch!r}, which is not a token")
                keep.add(text_to_id[ch])
    return keep


def write_fixture(source: Path, out: Path, arch: str, budget: int, template: str | None) -> int:
    reader = gguf.GGUFReader(str(source))
    fields = {name: f for name, f in reader.fields.items() if name.startswith("tokenizer.")}
    tokens = fields["tokenizer.ggml.tokens"].contents()
    types = fields["tokenizer.ggml.token_type"].contents()
    if fields["tokenizer.ggml.model"].contents() == "llama":
        keep = prune_spm(tokens, types, fields["tokenizer.ggml.scores"].contents(), budget)
    else:
        keep = prune_bpe(tokens, types, fields["tokenizer.ggml.merges"].contents(), budget)
    old_ids = sorted(keep)  # original order, so specials stay after the normal tokens
    new_id = {old: new for new, old in enumerate(old_ids)}
    kept_text = {tokens[i] for i in old_ids}

    writer = GGUFWriter(str(out), arch)
    name = reader.fields.get("general.name")
    if name is not None:
        writer.add_name(name.contents())
    for key, field in fields.items():
        value = field.contents()
        if key in LISTS and key != "tokenizer.ggml.merges":
            value = [value[i] for i in old_ids]
        elif key == "tokenizer.ggml.merges":
            value = [m for m in value if _merge_kept(m, kept_text)]
        elif key.endswith("_token_id"):
            if value not in new_id:
                continue  # e.g. a padding id outside the vocabulary: llama.cpp ignores it
            value = new_id[value]
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, vtype, sub_type)
    if template is not None and "tokenizer.chat_template" not in fields:
        writer.add_chat_template(template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return len(old_ids)


def _merge_kept(merge: str, kept_text: set[str]) -> bool:
    left, right = merge.split(" ", 1)
    return left in kept_text and right in kept_text and left + right in kept_text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-cpp", type=Path, default=DEFAULT_LLAMA_CPP,
                        help="llama.cpp source tree holding models/ggml-vocab-*.gguf")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    models = args.llama_cpp / "models"
    if not models.is_dir():
        raise SystemExit(f"no llama.cpp models folder at {models}; pass --llama-cpp DIR")
    args.out.mkdir(parents=True, exist_ok=True)
    for kind, (source, arch, budget, template_name) in KINDS.items():
        template = None
        if template_name is not None:
            template = (models / "templates" / template_name).read_text(encoding="utf-8")
        out = args.out / f"{kind}.gguf"
        n = write_fixture(models / source, out, arch, budget, template)
        print(f"{out.relative_to(REPO)}: {n} tokens, {out.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
