"""Writes small random-weight llama GGUFs with gguf.GGUFWriter, for fast tests.

The vocabulary is GPT-2's 256 byte symbols plus a few merges and ChatML control tokens, so the
real tokenizer and chat-template code paths run on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

CHATML = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a tiny test model.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "a n", "e r", "o n", "Ġ a"]


@dataclass(frozen=True)
class TinySpec:
    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 4
    n_kv_heads: int = 2
    ffn_dim: int = 128
    context_length: int = 256
    rope_theta: float = 10000.0
    tensor_type: QT = QT.F32
    architecture: str = "llama"
    tied: bool = True
    seed: int = 0


# K-quant super-blocks (256 weights) that gguf-py can dequantize but not produce: random bytes,
# with the f16 scale fields (byte offsets in the block) set to sane values.
K_QUANT_SCALES = {QT.Q4_K: ((0, 0.002), (2, 0.001)), QT.Q6_K: ((208, 0.0005),),
                  QT.Q5_K: ((0, 0.002), (2, 0.001))}


def random_k_quant(shape: tuple[int, int], qtype: QT, rng: np.random.Generator) -> np.ndarray:
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    rows, cols = shape
    blocks = rng.integers(0, 256, size=(rows * cols // block_elems, block_bytes), dtype=np.uint8)
    for offset, value in K_QUANT_SCALES[qtype]:
        blocks[:, offset : offset + 2] = np.frombuffer(np.float16(value).tobytes(), np.uint8)
    return blocks.reshape(rows, cols // block_elems * block_bytes)


def byte_symbols() -> list[str]:
    """GPT-2's printable stand-ins for the 256 byte values, in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    keep += list(range(ord("®"), ord("ÿ") + 1))
    symbols, extra = {}, 0
    for b in range(256):
        if b in keep:
            symbols[b] = chr(b)
        else:
            symbols[b] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in range(256)]


def tiny_vocab() -> tuple[list[str], list[int]]:
    tokens = SPECIALS + byte_symbols() + ["".join(m.split()) for m in MERGES]
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS))
    return tokens, types


def write_tiny_gguf(path: Path, spec: TinySpec = TinySpec()) -> Path:
    tokens, types = tiny_vocab()
    vocab, d, f = len(tokens), spec.d_model, spec.ffn_dim
    head_dim = d // spec.n_heads
    rng = np.random.default_rng(spec.seed)
    w = gguf.GGUFWriter(str(path), spec.architecture)
    w.add_name("tiny-test-llama")
    w.add_block_count(spec.n_layers)
    w.add_context_length(spec.context_length)
    w.add_embedding_length(d)
    w.add_feed_forward_length(f)
    w.add_head_count(spec.n_heads)
    w.add_head_count_kv(spec.n_kv_heads)
    w.add_rope_freq_base(spec.rope_theta)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(head_dim)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template(CHATML)

    def add(name: str, shape: tuple[int, ...], scale: float = 0.08, norm: bool = False) -> None:
        if norm:
            w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32))
            return
        data = (scale * rng.standard_normal(shape)).astype(np.float32)
        if spec.tensor_type in K_QUANT_SCALES:
            w.add_tensor(name, random_k_quant(shape, spec.tensor_type, rng),
                         raw_dtype=spec.tensor_type)
        elif spec.tensor_type == QT.F32:
            w.add_tensor(name, data)
        elif spec.tensor_type == QT.F16:
            w.add_tensor(name, data.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(data, spec.tensor_type),
                         raw_dtype=spec.tensor_type)

    add("token_embd.weight", (vocab, d), scale=0.5)
    add("output_norm.weight", (d,), norm=True)
    if not spec.tied:
        add("output.weight", (vocab, d))
    kv = spec.n_kv_heads * head_dim
    for i in range(spec.n_layers):
        add(f"blk.{i}.attn_norm.weight", (d,), norm=True)
        add(f"blk.{i}.attn_q.weight", (d, d))
        add(f"blk.{i}.attn_k.weight", (kv, d))
        add(f"blk.{i}.attn_v.weight", (kv, d))
        add(f"blk.{i}.attn_output.weight", (d, d))
        add(f"blk.{i}.ffn_norm.weight", (d,), norm=True)
        add(f"blk.{i}.ffn_gate.weight", (f, d))
        add(f"blk.{i}.ffn_up.weight", (f, d))
        add(f"blk.{i}.ffn_down.weight", (d, f))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
