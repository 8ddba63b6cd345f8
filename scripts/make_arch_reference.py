#!/usr/bin/env python3
"""Write a tiny GGUF per supported architecture and HF transformers' logits for it.

The fixtures prove each architecture's details (QKV bias, QK-norm, fused projections, RoPE
layout and scaling) against an implementation that is not ours: transformers loads the same
GGUF (dequantizing with gguf-py and un-permuting llama's Q/K rows), runs it in float32 with
eager attention, and its logits are stored beside the GGUF. tests/test_arch_reference.py
checks the numpy and ggml backends against them.

Each model carries a real tokenizer of its family's kind, copied from the small vocabulary
fixtures in tests/fixtures/vocab/ (scripts/make_vocab_fixtures.py), so `channel chat` runs on
it end to end. Weights are random, so the text generated is not meant to read well.

    .venv/bin/pip install -e '.[reference]'
    .venv/bin/python scripts/make_arch_reference.py [--only NAME ...]

--only rewrites the named fixtures and their entries in reference.npz and index.json, and
keeps every other entry as it is (a new fixture need not regenerate the others).

transformers' GGUF loader does not read everything: it ignores `rope_freqs` (Llama 3
scaling), linear RoPE scaling and Qwen3's key_length. Those are given to it explicitly below
(HF_CONFIG), from the same values the GGUF was written with; nothing is fetched from a hub.
It does not read qwen35 at all: scripts/qwen35_reference.py builds transformers' qwen3_5 over
the GGUF's weights instead.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import sys
import zipfile
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # read before transformers is imported

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from gguf import GGMLQuantizationType as QT  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.model.architecture import CONV, FULL  # noqa: E402
from scripts.qwen35_reference import qwen35_model  # noqa: E402
from tests.tiny_model import (  # noqa: E402
    LLAMA3_SCALING,
    TinySpec,
    copy_tokenizer,
    gemma_tokenizer,
    lfm2_tokenizer,
    write_tiny_gguf,
)
from tests.tiny_qwen35 import qwen35_tokenizer  # noqa: E402

OUT = REPO / "tests" / "fixtures" / "arch"
VOCAB = REPO / "tests" / "fixtures" / "vocab"
N_INPUT = 24
N_GREEDY = 16
SUBSET = 256  # logits kept per position: a seeded sample of the vocabulary

# name -> (spec, vocabulary fixture, what transformers must be told that it does not read)
FIXTURES: dict[str, tuple[TinySpec, str, dict]] = {
    "llama3": (TinySpec(architecture="llama", rope_freq_factors=True, tied=False),
               "llama-bpe", {"rope_scaling": LLAMA3_SCALING}),
    "llama-linear": (TinySpec(architecture="llama", rope_linear_factor=2.0),
                     "llama-spm", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
    "mistral": (TinySpec(architecture="llama", n_kv_heads=1, rope_theta=1e6), "llama-spm", {}),
    "qwen2": (TinySpec(architecture="qwen2", rope_theta=1e6), "qwen2", {}),
    "qwen3": (TinySpec(architecture="qwen3", head_dim=32, rope_theta=1e6), "qwen2",
              {"head_dim": 32}),
    "phi3": (TinySpec(architecture="phi3", tied=False, n_kv_heads=4), "phi-3", {}),
    # Five window layers (8 tokens, so windows slide within the input) to one global layer
    # with linear RoPE scaling, as Gemma 3 4B+ has; wide heads. Untied: random tied
    # embeddings, scaled by sqrt(d_model), make every greedy step repeat one token. The GGUF
    # carries neither query_pre_attn_scalar (llama.cpp: head_dim) nor, for HF, the global
    # layers' scaling.
    "gemma3": (TinySpec(architecture="gemma3", n_layers=6, head_dim=32, rope_theta=1e6,
                        sliding_window=8, rope_linear_factor=8.0, tied=False), "gemma3",
               {"query_pre_attn_scalar": 32,
                "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0}}}),
    # Short-convolution layers (3 taps) around one grouped-query attention layer with
    # QK-norm; token_embd_norm as the final norm, as LFM2's GGUFs have. Untied, unlike real
    # LFM2: random tied embeddings make every position predict its own token, and the
    # greedy check would repeat one token. transformers reads the per-layer K/V heads (0:
    # conv) and l_cache from the GGUF, not that the output matrix is untied.
    "lfm2": (TinySpec(architecture="lfm2", n_layers=4, layer_kinds=(CONV, CONV, FULL, CONV),
                      conv_kernel=3, rope_theta=1e6, tied=False), "lfm2",
             {"tie_word_embeddings": False}),
    # Three gated delta-net layers to one gated-query attention layer (QK-norm, RoPE on 8 of
    # each head's 32 dims), as Qwen3.5 lays them out; four value heads tiled over two key
    # heads, so the GGUF's head order is exercised; an MTP block after the trunk, ignored.
    # Untied, as the lfm2 fixture is (Qwen3.5 0.8B-4B tie theirs).
    "qwen35": (TinySpec(architecture="qwen35", n_layers=4, head_dim=32, rope_dim=8,
                        rope_theta=1e7, conv_kernel=4, delta_heads=(2, 4, 16), nextn=1,
                        tied=False), "qwen35", {}),
}
# Fixtures added later keep their seed wherever they sit in FIXTURES (the first six: their
# position), so that adding another never changes their bytes.
SEEDS = {"gemma3": 6}
# Each family's turn format, as its real templates render a plain conversation (the real
# ones add tool calls and reasoning branches; this is what a chat without them renders).
CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
          "'<|im_end|>\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA3 = ("{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + "
          "'<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}{% endfor %}"
          "{% if add_generation_prompt %}"
          "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
MISTRAL = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'assistant' %}"
           "{{ m['content'] + eos_token }}{% else %}"
           "{{ '[INST] ' + m['content'] + ' [/INST]' }}{% endif %}{% endfor %}")
PHI3 = ("{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + '<|end|>\\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}")
TEMPLATES = {"llama-bpe": LLAMA3, "llama-spm": MISTRAL, "qwen2": CHATML, "phi-3": PHI3}
# Vocabularies made from another fixture's (no such vocabulary can be fetched offline).
DERIVED_VOCABULARIES = {"gemma3": ("llama-spm", gemma_tokenizer),
                        "lfm2": ("qwen2", lfm2_tokenizer), "qwen35": ("qwen2", qwen35_tokenizer)}
WEIGHT_TYPE = QT.Q8_0  # quantized like real files; both sides dequantize with gguf-py


def tokenizer_with_template(writer, source: Path, template: str) -> int:
    """The vocabulary fixture's tokenizer, plus its family's chat template if it has none."""
    size = copy_tokenizer(writer, source)
    if "tokenizer.chat_template" not in writer.kv_data[0]:
        writer.add_chat_template(template)
    return size


def hf_model(path: Path, patch: dict) -> torch.nn.Module:
    config = transformers.AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
    for key, value in patch.items():
        if key == "rope_scaling":  # transformers 5 keeps RoPE settings in rope_parameters
            config.rope_parameters = {**config.rope_parameters, **value}
        elif key == "rope_parameters":  # per layer type (Gemma 3: full and sliding attention)
            for layer_type, params in value.items():
                config.rope_parameters[layer_type].update(params)
        else:
            setattr(config, key, value)
    if (getattr(config, "pad_token_id", None) or 0) >= config.vocab_size:
        config.pad_token_id = None  # a default from the full-size model (phi3: 32000)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, config=config, dtype=torch.float32,
        attn_implementation="eager")
    return model.eval()


@torch.no_grad()
def reference(path: Path, patch: dict, vocab: int, seed: int,
              architecture: str) -> dict[str, np.ndarray]:
    model = qwen35_model(path) if architecture == "qwen35" else hf_model(path, patch)
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, N_INPUT)
    logits = model(torch.tensor(ids[None])).logits[0].numpy()  # (N_INPUT, vocab)
    greedy, margins = list(ids), []
    for _ in range(N_GREEDY):
        step = model(torch.tensor([greedy])).logits[0, -1]
        top2 = torch.topk(step, 2).values
        greedy.append(int(step.argmax()))
        margins.append(float(top2[0] - top2[1]))  # how near a tie each greedy choice was
    subset = np.sort(rng.choice(vocab, min(SUBSET, vocab), replace=False))
    lse = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
    return {"ids": ids.astype(np.int64), "subset": subset.astype(np.int64),
            "subset_logits": logits[:, subset].astype(np.float32),
            "argmax": logits.argmax(1).astype(np.int64), "lse": lse.astype(np.float32),
            "greedy": np.asarray(greedy[N_INPUT:], np.int64),
            "greedy_margin": np.asarray(margins, np.float32)}


def save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """np.savez_compressed's file, minus its clock: every entry is dated 1980-01-01, so
    regenerating the same values writes the same bytes."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for key, value in arrays.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.asanyarray(value), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, buffer.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=sorted(FIXTURES), default=None)
    only = parser.parse_args().only
    OUT.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    index: dict[str, dict] = {}
    if only:  # keep the other fixtures' entries as they are
        with np.load(OUT / "reference.npz") as kept:
            arrays = {k: kept[k] for k in kept.files if k.split("/")[0] not in only}
        index = json.loads((OUT / "index.json").read_text())["fixtures"]
    for position, (name, (spec, vocab_kind, patch)) in enumerate(FIXTURES.items()):
        if only and name not in only:
            continue
        seed = SEEDS.get(name, position)
        spec = TinySpec(**{**spec.__dict__, "tensor_type": WEIGHT_TYPE, "seed": seed,
                           "context_length": 128})
        path = OUT / f"{name}.gguf"
        if vocab_kind in DERIVED_VOCABULARIES:
            base, derive = DERIVED_VOCABULARIES[vocab_kind]
            source = VOCAB / f"{base}.gguf"
            tokenizer = functools.partial(derive, source=source)
        else:
            source = VOCAB / f"{vocab_kind}.gguf"
            tokenizer = functools.partial(tokenizer_with_template, source=source,
                                          template=TEMPLATES[vocab_kind])
        if not source.is_file():
            print(f"note: {source} missing; {name} gets the tiny byte vocabulary", file=sys.stderr)
            tokenizer, vocab_kind = None, "tiny"
        write_tiny_gguf(path, spec, tokenizer=tokenizer)
        from engine.model.gguf_file import open_model
        vocab = open_model(path).config.vocab_size
        for key, value in reference(path, patch, vocab, seed, spec.architecture).items():
            arrays[f"{name}/{key}"] = value
        index[name] = {"architecture": spec.architecture, "vocabulary": vocab_kind,
                       "vocab_size": vocab, "bytes": path.stat().st_size, "hf_config": patch}
        print(f"{name}: {path.stat().st_size} bytes, vocab {vocab}", file=sys.stderr)
    save_npz(OUT / "reference.npz", arrays)
    meta = {"transformers": transformers.__version__, "torch": torch.__version__,
            "n_input": N_INPUT, "n_greedy": N_GREEDY, "fixtures": index}
    (OUT / "index.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
