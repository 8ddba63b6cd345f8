"""Writes small random-weight GGUFs of every supported architecture, for fast tests.

The vocabulary is GPT-2's 256 byte symbols plus a few merges and ChatML control tokens, so the
real tokenizer and chat-template code paths run on it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

from engine.model.architecture import ARCHITECTURES, CONV, layer_kinds
from engine.model.delta_net import add_delta_metadata, delta_tensor_shapes

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
    architecture: str = "llama"  # any key of engine.model.architecture.ARCHITECTURES
    tied: bool = True
    seed: int = 0
    head_dim: int = 0  # 0: d_model / n_heads; else written as attention.key_length (qwen3)
    rope_freq_factors: bool = False  # a Llama 3 style rope_freqs.weight tensor
    rope_linear_factor: float = 0.0  # linear RoPE scaling factor (0: none)
    sliding_window: int = 0  # written as attention.sliding_window when set (gemma3's layers)
    # Each layer's kind, where some are CONV (LFM2): head_count_kv is then written per layer,
    # 0 for a CONV layer, with shortconv.l_cache = conv_kernel. (): every layer attends.
    layer_kinds: tuple[str, ...] = ()
    conv_kernel: int = 3
    # Qwen3.5's DELTA layers: (key heads, value heads, head width) and the layers between
    # attention layers (written as full_attention_interval; 0: the architecture's), with
    # ssm.conv_kernel = conv_kernel. rope_dim: RoPE on the first rope_dim dims of each head
    # (0: all). nextn: multi-token-prediction blocks appended after the trunk.
    delta_heads: tuple[int, int, int] = (2, 4, 16)
    delta_interval: int = 0
    rope_dim: int = 0
    nextn: int = 0
    # The matrices' types in turn, in file order (the first matrix the first type, ...),
    # in place of tensor_type: one model of several types. IQ and K-quant types need rows
    # of whole 256-weight blocks (d_model and ffn_dim multiples of 256).
    matrix_types: tuple[QT, ...] = ()
    # The random K-quant blocks' f16 fields, per type, in place of K_QUANT_SCALES': (type,
    # ((byte offset, value), ...)) pairs.
    k_quant_scales: tuple = ()

    @property
    def hd(self) -> int:
        return self.head_dim or self.d_model // self.n_heads


# K-quant super-blocks (256 weights) that gguf-py can dequantize but not produce: random bytes,
# with the f16 scale fields (byte offsets in the block) set to sane values.
K_QUANT_SCALES = {QT.Q4_K: ((0, 0.002), (2, 0.001)), QT.Q6_K: ((208, 0.0005),),
                  QT.Q5_K: ((0, 0.002), (2, 0.001)), QT.Q3_K: ((108, 0.001),)}


def random_k_quant(shape: tuple[int, int], qtype: QT, rng: np.random.Generator,
                   scales: dict | None = None) -> np.ndarray:
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    rows, cols = shape
    blocks = rng.integers(0, 256, size=(rows * cols // block_elems, block_bytes), dtype=np.uint8)
    for offset, value in (scales or K_QUANT_SCALES)[qtype]:
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


# Llama 3.1's rope_scaling, with the original context shrunk so that a tiny model's few
# frequencies fall in all three bands (kept, divided by `factor`, smoothly in between).
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64}


def llama3_rope_factors(head_dim: int, theta: float, scaling: dict = LLAMA3_SCALING) -> np.ndarray:
    """The rope_freqs tensor llama.cpp's converter writes for Llama 3.1+ (convert_hf_to_gguf
    LlamaModel.generate_extra_tensors): a divisor per frequency."""
    factor, old_context = scaling["factor"], scaling["original_max_position_embeddings"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    freqs = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    out = []
    for freq in freqs:
        wavelen = 2 * np.pi / freq
        if wavelen < old_context / high:
            out.append(1.0)
        elif wavelen > old_context / low:
            out.append(factor)
        else:
            smooth = (old_context / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def field_value(field: gguf.ReaderField) -> tuple[Any, gguf.GGUFValueType, Any]:
    """A reader field as (value, type, array element type); strings stay raw bytes."""
    main = field.types[0]
    if main == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]), main, None
    if main != gguf.GGUFValueType.ARRAY:
        return field.contents(), main, None
    if len(field.types) != 2:
        raise ValueError(f"nested array metadata is not supported: {field.name}")
    sub = field.types[1]
    if sub == gguf.GGUFValueType.STRING:
        return [bytes(field.parts[i]) for i in field.data], main, sub
    return field.contents(), main, sub


def copy_tokenizer(writer: gguf.GGUFWriter, source: Path) -> int:
    """Copy every tokenizer.* key from the GGUF `source`; returns the vocabulary size.
    Pass `functools.partial(copy_tokenizer, source=...)` as write_tiny_gguf's tokenizer."""
    reader = gguf.GGUFReader(source, "r")
    n_vocab = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        value, vtype, sub = field_value(field)
        writer.add_key_value(key, value, vtype, sub_type=sub)
        if key == "tokenizer.ggml.tokens":
            n_vocab = len(value)
    if not n_vocab:
        raise ValueError(f"{source} has no tokenizer.ggml.tokens")
    return n_vocab


def tensor_shapes(spec: TinySpec, vocab: int) -> dict[str, tuple[int, ...]]:
    """Every tensor the architecture table asks for, with its numpy-order shape."""
    # An architecture outside the table gets llama's tensors: tests of its refusal need a file.
    arch = ARCHITECTURES.get(spec.architecture, ARCHITECTURES["llama"])
    d, f, hd = spec.d_model, spec.ffn_dim, spec.hd
    q, kv = spec.n_heads * hd, spec.n_kv_heads * hd
    by_role = {
        "token_embd.weight": (vocab, d), "output.weight": (vocab, d), "output_norm.weight": (d,),
        "rope_freqs.weight": (hd // 2,),
        "attn_norm.weight": (d,), "ffn_norm.weight": (d,),
        "attn_q.weight": (q, d), "attn_k.weight": (kv, d), "attn_v.weight": (kv, d),
        "attn_qkv.weight": (q + 2 * kv, d), "attn_output.weight": (d, q),
        "attn_q.bias": (q,), "attn_k.bias": (kv,), "attn_v.bias": (kv,),
        "attn_q_norm.weight": (hd,), "attn_k_norm.weight": (hd,),
        "post_attention_norm.weight": (d,), "post_ffw_norm.weight": (d,),
        "ffn_gate.weight": (f, d), "ffn_down.weight": (d, f),
        "ffn_up.weight": (2 * f, d) if arch.fused_gate_up else (f, d),
        "token_embd_norm.weight": (d,), "shortconv.in_proj.weight": (3 * d, d),
        "shortconv.conv.weight": (d, spec.conv_kernel), "shortconv.out_proj.weight": (d, d),
    }
    if arch.gated_query:  # a gate row per query row, interleaved per head
        by_role["attn_q.weight"] = (2 * q, d)
    if arch.delta_interval:
        by_role.update(delta_tensor_shapes(d, *spec.delta_heads, spec.conv_kernel))
    kinds = spec.layer_kinds or layer_kinds(arch, spec.n_layers, 0, (), spec.delta_interval)
    names = arch.model_tensors(spec.n_layers, spec.tied, spec.rope_freq_factors, kinds)
    shapes = {name: by_role[name.split(".", 2)[-1] if name.startswith("blk.") else name]
              for name in names}
    for i in range(spec.n_layers, spec.n_layers + spec.nextn):  # MTP blocks: never read
        shapes |= {name.replace("blk.0.", f"blk.{i}."): shape for name, shape in
                   tensor_shapes(replace(spec, n_layers=1, nextn=0, delta_interval=1),
                                 vocab).items() if name.startswith("blk.0.")}
        shapes |= {f"blk.{i}.nextn.eh_proj.weight": (d, 2 * d),
                   f"blk.{i}.nextn.enorm.weight": (d,), f"blk.{i}.nextn.hnorm.weight": (d,)}
    return shapes


def write_tiny_gguf(path: Path, spec: TinySpec = TinySpec(),
                    tokenizer: Callable[[gguf.GGUFWriter], int] | None = None) -> Path:
    """Write a random-weight GGUF of `spec`. `tokenizer(writer)` may write another
    vocabulary's tokenizer.* keys and return its size; the default is the tiny byte vocab."""
    rng = np.random.default_rng(spec.seed)
    w = gguf.GGUFWriter(str(path), spec.architecture)
    w.add_name(f"tiny-test-{spec.architecture}")
    vocab = _add_tiny_tokenizer(w) if tokenizer is None else tokenizer(w)
    d, f, hd = spec.d_model, spec.ffn_dim, spec.hd
    w.add_block_count(spec.n_layers + spec.nextn)
    if spec.nextn:
        w.add_uint32(f"{spec.architecture}.nextn_predict_layers", spec.nextn)
    if ARCHITECTURES.get(spec.architecture, ARCHITECTURES["llama"]).delta_interval:
        add_delta_metadata(w, spec.conv_kernel, *spec.delta_heads, spec.delta_interval,
                           spec.rope_dim or hd)
    w.add_context_length(spec.context_length)
    w.add_embedding_length(d)
    w.add_feed_forward_length(f)
    w.add_head_count(spec.n_heads)
    if CONV in spec.layer_kinds:
        w.add_head_count_kv([0 if kind == CONV else spec.n_kv_heads
                             for kind in spec.layer_kinds])
        w.add_shortconv_l_cache(spec.conv_kernel)
    else:
        w.add_head_count_kv(spec.n_kv_heads)
    if spec.head_dim:
        w.add_key_length(hd)
        w.add_value_length(hd)
    w.add_rope_freq_base(spec.rope_theta)
    if spec.rope_linear_factor:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(spec.rope_linear_factor)
    if spec.sliding_window:
        w.add_sliding_window(spec.sliding_window)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(spec.rope_dim or hd)
    w.add_vocab_size(vocab)

    def add(name: str, shape: tuple[int, ...]) -> None:
        if name == "rope_freqs.weight":
            w.add_tensor(name, llama3_rope_factors(hd, spec.rope_theta))
            return
        if name.endswith(".ssm_a"):  # -exp(A_log): a decay rate, negative
            w.add_tensor(name, -(0.5 + rng.random(shape)).astype(np.float32))
            return
        if len(shape) == 1:  # norms near 1, biases near 0; always F32, as converters write
            base = 0.0 if name.endswith(".bias") else 1.0
            w.add_tensor(name, (base + 0.1 * rng.standard_normal(shape)).astype(np.float32))
            return
        if name.endswith(("shortconv.conv.weight", "ssm_conv1d.weight")):  # F32: rows of taps
            w.add_tensor(name, (0.3 * rng.standard_normal(shape)).astype(np.float32))
            return
        scale = 0.5 if name == "token_embd.weight" else 0.08
        data = (scale * rng.standard_normal(shape)).astype(np.float32)
        qtype = spec.matrix_types[next(turn) % len(spec.matrix_types)] \
            if spec.matrix_types else spec.tensor_type
        if qtype in K_QUANT_SCALES:
            w.add_tensor(name, random_k_quant(shape, qtype, rng,
                                              dict(spec.k_quant_scales) or None), raw_dtype=qtype)
        elif qtype == QT.F32:
            w.add_tensor(name, data)
        elif qtype == QT.F16:
            w.add_tensor(name, data.astype(np.float16))
        elif qtype.name.startswith("IQ"):  # gguf-py cannot quantize these; ggml can
            from .iq_blocks import quantize  # noqa: PLC0415 - needs the ggml bindings

            w.add_tensor(name, quantize(data, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)

    turn = itertools.count()
    for name, shape in tensor_shapes(spec, vocab).items():
        add(name, shape)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_tiny_gguf_with_template(path: Path, template: str) -> Path:
    """The tiny model with another chat template (the tiny byte vocabulary)."""
    return write_tiny_gguf(path, tokenizer=lambda w: _add_tiny_tokenizer(w, template))


# Refuses a system message, as some templates do: a conversation without one still renders.
NO_SYSTEM_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'system' %}"
    "{{ raise_exception('no system messages') }}{% endif %}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def _add_tiny_tokenizer(w: gguf.GGUFWriter, template: str = CHATML) -> int:
    tokens, types = tiny_vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template(template)
    return len(tokens)


# Gemma 3's chat template (google/gemma-3-*-it): a system message is folded into the first
# user turn, the assistant's role is "model", and every turn ends with <end_of_turn>.
GEMMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- if messages[0]['content'] is string -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}"
    "{%- endif -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = \"\" -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}"
    "{%- endif -%}"
    "{%- if (message['role'] == 'assistant') -%}"
    "{%- set role = \"model\" -%}"
    "{%- else -%}"
    "{%- set role = message['role'] -%}"
    "{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}"
    "{%- if message['content'] is string -%}"
    "{{ message['content'] | trim }}"
    "{%- elif message['content'] is iterable -%}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}"
    "{{ '<start_of_image>' }}"
    "{%- elif item['type'] == 'text' -%}"
    "{{ item['text'] | trim }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- else -%}"
    "{{ raise_exception(\"Invalid content type\") }}"
    "{%- endif -%}"
    "{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{'<start_of_turn>model\\n'}}"
    "{%- endif -%}"
)
# Gemma's first ids (pad, eos, bos, unk) and the turn markers, as its GGUFs declare them.
GEMMA_SPECIALS = [("<pad>", 3), ("<eos>", 3), ("<bos>", 3), ("<unk>", 2)]
GEMMA_TURN_MARKERS = ["<start_of_turn>", "<end_of_turn>"]


def gemma_tokenizer(writer: gguf.GGUFWriter, source: Path) -> int:
    """A Gemma-style SentencePiece tokenizer from the SentencePiece fixture `source`: its
    <unk>, <s>, </s> give way to Gemma's <pad>, <eos>, <bos>, <unk> (ids 0-3), its pieces
    follow, then <start_of_turn> and <end_of_turn>; add_bos on, no space prefix (as
    llama.cpp's converter writes Gemma 3), and Gemma 3's chat template. Returns the size."""
    reader = gguf.GGUFReader(source, "r")

    def values(key: str) -> list:
        return field_value(reader.fields[key])[0]

    pieces = values("tokenizer.ggml.tokens")[3:]  # past <unk>, <s>, </s>
    tokens = [name.encode() for name, _ in GEMMA_SPECIALS] + pieces + [
        name.encode() for name in GEMMA_TURN_MARKERS]
    types = [kind for _, kind in GEMMA_SPECIALS] + list(values("tokenizer.ggml.token_type")[3:])
    types += [3] * len(GEMMA_TURN_MARKERS)
    scores = [0.0] * len(GEMMA_SPECIALS) + list(values("tokenizer.ggml.scores")[3:])
    scores += [0.0] * len(GEMMA_TURN_MARKERS)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_scores(scores)
    writer.add_pad_token_id(0)
    writer.add_eos_token_id(1)
    writer.add_bos_token_id(2)
    writer.add_unk_token_id(3)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(False)
    writer.add_chat_template(GEMMA3_TEMPLATE)
    return len(tokens)


# LFM2's chat template (LiquidAI/LFM2-*), without its tool-calling branches: a BOS, then
# ChatML turns; a system message is kept only when there is one.
LFM2_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- set ns = namespace(system_prompt='') -%}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set ns.system_prompt = messages[0]['content'] -%}"
    "{%- set messages = messages[1:] -%}"
    "{%- endif -%}"
    "{%- if ns.system_prompt -%}"
    "{{- '<|im_start|>system\\n' + ns.system_prompt + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- set content = message['content'] -%}"
    "{%- if content is not string -%}{%- set content = content | tojson -%}{%- endif -%}"
    "{{- content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def borrowed_bpe(writer: gguf.GGUFWriter, source: Path, pre: str,
                 added: dict[bytes, int]) -> tuple[dict[str, int], int]:
    """Write the byte-level BPE vocabulary of the fixture `source` (qwen2's), its tokens and
    merges, with the `added` tokens (text -> token type) after them, under pre-tokenizer
    `pre`. Returns each token's id and the vocabulary size; the caller adds its special
    ids and chat template."""
    reader = gguf.GGUFReader(source, "r")

    def values(key: str) -> list:
        return field_value(reader.fields[key])[0]

    tokens = list(values("tokenizer.ggml.tokens")) + list(added)
    types = list(values("tokenizer.ggml.token_type")) + list(added.values())
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(values("tokenizer.ggml.merges"))
    return {bytes(t).decode(): i for i, t in enumerate(tokens)}, len(tokens)


def lfm2_tokenizer(writer: gguf.GGUFWriter, source: Path) -> int:
    """An LFM2-style byte-level BPE tokenizer from the byte-level fixture `source` (qwen2's):
    its tokens and merges, pre-tokenizer `lfm2` (llama.cpp groups it with llama3's regex),
    <|startoftext|> added as the BOS that LFM2 always prepends, <|im_end|> as EOS (as LFM2's
    GGUFs declare it), and LFM2's chat template. Returns the vocabulary size."""
    ids, size = borrowed_bpe(writer, source, "lfm2", {b"<|startoftext|>": 3})
    writer.add_bos_token_id(ids["<|startoftext|>"])
    writer.add_eos_token_id(ids["<|im_end|>"])
    writer.add_pad_token_id(ids["<|endoftext|>"])
    writer.add_add_bos_token(True)
    writer.add_chat_template(LFM2_TEMPLATE)
    return size
