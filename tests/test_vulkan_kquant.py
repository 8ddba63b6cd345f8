"""The Vulkan backend reads the block types K-quant GGUFs mix (issue 34, item 1): Q5_0, Q5_1,
Q3_K, Q4_K, Q5_K and Q6_K, re-encoded at upload (engine/backends/vulkan/encodings.py).

First the re-encodings alone, without a device: what the shaders compute from the encoded
words (a numpy transcription of common.glsl's scale_words and load_block) equals gguf-py's
dequantization bit for bit, on ggml's own quantized blocks and on random blocks (every code,
negative Q6_K scales); the planner's chunks and pieces count the encodings' words. Then tiny
models whose matrices are of these types, one mixed as a Q4_K_M file mixes them (a Q4_K q|k
fused with a Q6_K v), held to the numpy backend on the device (lavapipe in CI; scripts/device
call 1 runs them on the H200, where tiled prefill takes matmul_coopmat): every decode step
under the CPU shapes, tiled prefill then split-row decode under the GPU shapes, and a run
split into chunks by lowered binding limits.
"""

from __future__ import annotations

from dataclasses import replace

import gguf
import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT

from engine.backends import problems_running
from engine.backends.vulkan.chunks import Copy, Planner
from engine.backends.vulkan.direct_encodings import encode_blocks
from engine.backends.vulkan.encodings import (
    ENCODINGS,
    K4,
    K5,
    K6,
    K6X,
    Q8M,
    SOURCES,
    encode,
    encoding_of,
    form_of,
)
from engine.backends.vulkan.tuning import CPU, GPU
from engine.backends.vulkan.weights import _copy_blocks
from engine.model.model import TensorInfo, load_model

from .parity import TOKENS, run_steps
from .test_vulkan_limits import lower_limits
from .test_vulkan_prefill import assert_tiled_prefill_then_decode
from .tiny_model import TinySpec, random_k_quant, write_tiny_gguf

ATOL = 5e-5  # as tests/test_vulkan_parity.py

NEW = [QT.Q5_0, QT.Q5_1, QT.Q3_K, QT.Q4_K, QT.Q5_K, QT.Q6_K]


def shader_values(payload: np.ndarray, words: np.ndarray, encoding: int) -> np.ndarray:
    """(n, 32) f32: common.glsl's block_texel, high_words, scale_words and load_block, then
    embed.comp's w * d + m, in numpy."""
    def half(bits):
        return (bits & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float32)[:, None]

    words, payload = words.ravel(), payload.reshape(-1)
    if encoding in (8, Q8M):
        d, m = half(words), half(words >> 16) if encoding == Q8M else 0
        return payload.reshape(-1, 32).view(np.int8).astype(np.float32) * d + m
    enc = ENCODINGS[encoding]
    groups = words.reshape(-1, enc.words)
    head = np.repeat(groups[:, 0], 8)
    sb = payload.reshape(-1, enc.texels * 16)  # a super-block's payload
    nibbles = sb[:, :128].reshape(-1, 16)
    codes = np.concatenate([nibbles & 15, nibbles >> 4], axis=1).astype(np.float32)
    if encoding == K5:
        bits = np.unpackbits(sb[:, 128:].reshape(-1, 4), axis=1, bitorder="little")
        codes += 16 * bits
    if encoding in (K6, K6X):
        halves = sb[:, 128:].reshape(-1, 8).copy().view(np.uint32)  # (n, 2)
        top = (halves[:, :, None] >> (2 * np.arange(16, dtype=np.uint32))) & 3
        codes += 16 * top.reshape(-1, 32).astype(np.float32) - 32
    if encoding == K6X:
        small = groups[:, 1:].ravel()
    else:
        pair = ((groups[:, 1:, None] >> np.array([0, 16], np.uint32)) & 0xFFFF).ravel()
        small = pair if encoding == K6 else (pair & 0xFF) * 0x101 | ((pair >> 8) << 16)
    small = small.astype(np.uint32)[:, None].view(np.uint8)[:, :3].view(np.int8)  # s0, s1, o
    small = small.astype(np.float32)
    scale = np.repeat(small[:, :2], 16, axis=1)
    return (codes * scale) * half(head) + half(head >> 16) * small[:, 2:3]


def random_blocks(qtype: QT, n: int, rng: np.random.Generator) -> np.ndarray:
    """n random blocks (every bit pattern of the codes and scales), f16 fields kept finite."""
    elements, nbytes = GGML_QUANT_SIZES[qtype]
    if elements == 256:
        return random_k_quant((n, 256), qtype, rng)
    blocks = rng.integers(0, 256, (n, nbytes), dtype=np.uint8)
    for at in (0, 2) if qtype == QT.Q5_1 else (0,):
        blocks[:, at : at + 2] = rng.uniform(-0.05, 0.05, n).astype(np.float16)[:, None].view(
            np.uint8)
    return blocks


def ggml_blocks(qtype: QT, rng: np.random.Generator) -> np.ndarray:
    """ggml's own quantization of normal weights (llama.cpp's quantizer), 8 rows of 512."""
    from .iq_blocks import quantize  # noqa: PLC0415 - needs the ggml bindings

    data = (0.08 * rng.standard_normal((8, 512))).astype(np.float32)
    return quantize(data, qtype).reshape(-1, GGML_QUANT_SIZES[qtype][1])


@pytest.mark.parametrize("qtype", NEW + [QT.Q4_0, QT.Q4_1, QT.Q8_0], ids=lambda t: t.name)
@pytest.mark.parametrize("source", ["random", "ggml"])
def test_reencoding_is_gguf_pys_dequantization_exactly(qtype, source) -> None:
    rng = np.random.default_rng(int(qtype))
    if source == "ggml":
        pytest.importorskip("ggml")
        blocks = ggml_blocks(qtype, rng)
    else:
        blocks = random_blocks(qtype, 64, rng)
    want = gguf.quants.dequantize(blocks, qtype).reshape(-1, 32)
    form = form_of(blocks, qtype)
    # Its own encoding (the old types as the shaders already read them), and the one a
    # fused matrix mixing it with another type of its kind is written in.
    wide = K6X if GGML_QUANT_SIZES[qtype][0] == 256 else Q8M
    for encoding in {SOURCES[qtype], wide}:
        if encoding in (2, 3):
            continue  # stored as their GGUF blocks, not through the form
        enc = ENCODINGS[encoding]
        payload, words = encode(form, encoding)
        direct = encode_blocks(blocks, qtype, encoding)  # Q4_K's and Q6_K's byte paths
        np.testing.assert_array_equal(direct[0], payload)
        np.testing.assert_array_equal(direct[1], words)
        assert payload.shape == (len(want) // enc.group, 16 * enc.texels)
        assert words.shape == (len(want) // enc.group, enc.words)
        np.testing.assert_array_equal(shader_values(payload, words, encoding), want)


def test_mixed_fused_matrices_take_a_wide_encoding() -> None:
    assert encoding_of([QT.Q4_K, QT.Q4_K]) == K4
    assert encoding_of([QT.Q5_0, QT.Q8_0]) == 8  # both are Q8_0's encoding
    assert encoding_of([QT.Q4_K, QT.Q4_K, QT.Q6_K]) == K6X  # a Q4_K_M q|k|v
    assert encoding_of([QT.Q4_0, QT.Q8_0]) == 8
    assert encoding_of([QT.Q4_1, QT.Q8_0]) == Q8M
    # No common quantized form (floats; a per-256 d beside a per-32 one): dequantized, F32.
    assert encoding_of([QT.F16, QT.Q4_K]) == 0
    assert encoding_of([QT.Q4_K, QT.Q4_0]) == 0
    with pytest.raises(ValueError, match="K4"):
        encode(form_of(random_blocks(QT.Q5_K, 2, np.random.default_rng(0)), QT.Q5_K), K4)
    with pytest.raises(ValueError, match="K6"):  # Q4_K's offsets
        encode(form_of(random_blocks(QT.Q4_K, 2, np.random.default_rng(0)), QT.Q4_K), K6)
    with pytest.raises(ValueError, match="Q8_0"):
        encode(form_of(random_blocks(QT.Q5_1, 2, np.random.default_rng(0)), QT.Q5_1), 8)


# Tiny models (rows of 256: whole K-quant super-blocks); matrix types in file order: token_embd,
# output, then per layer attn_output, ffn_down, ffn_up, attn_q, attn_k, attn_v, ffn_gate.
Q4_K_M = (QT.Q4_K, QT.Q6_K) + (QT.Q4_K, QT.Q6_K, QT.Q4_K, QT.Q4_K, QT.Q4_K, QT.Q6_K, QT.Q4_K) * 2
ALONE = (QT.Q6_K, QT.Q5_1,
         QT.Q5_0, QT.Q5_1, QT.Q5_K, QT.Q6_K, QT.Q6_K, QT.Q6_K, QT.Q5_K,
         QT.Q3_K, QT.Q4_K, QT.Q5_0, QT.Q5_1, QT.Q5_1, QT.Q5_1, QT.Q5_0)
# name -> (matrix types, other TinySpec fields): qwen2's split-half RoPE has the upload
# interleave the rows of K-quant q and k (weights.py).
# Fused matrices of no common quantized form, stored dequantized: layer 0's q|k|v (Q4_K, Q4_0,
# F16) and gate|up (Q4_K gate, Q8_0 up).
MIXED = (QT.Q8_0, QT.Q6_K,
         QT.Q4_0, QT.Q4_K, QT.Q8_0, QT.Q4_K, QT.Q4_0, QT.F16, QT.Q4_K) + (QT.Q4_K,) * 7
MODELS = {"q4_k_m": (Q4_K_M, {}), "alone": (ALONE, {}), "mixed": (MIXED, {}),
          "qwen2-q4_k_m": (Q4_K_M, {"architecture": "qwen2"})}
# The encodings each model's matrices take: (embed, output, layer 0's q|k|v, wo, gate|up, down)
# and layer 1's.
EXPECTED = {
    "q4_k_m": (K4, K6, [(K6X, K4, K4, K6), (K6X, K4, K4, K6)]),
    "alone": (K6, Q8M, [(K6, 8, K5, Q8M), (Q8M, K6X, 8, K4)]),
    "mixed": (8, K6, [(0, 2, 0, K4), (K4, K4, K4, K4)]),
    "qwen2-q4_k_m": (K4, K6, [(K6X, K4, K4, K6), (K6X, K4, K4, K6)]),
}


# Random K-quant blocks (every code) with f16 fields that keep the weights near the other
# types' (std ~0.08, near-zero mean: Q4_K/Q5_K dmin = d times the codes' mean), so that the
# logits stay small enough for the parity tolerance.
SCALES = ((QT.Q4_K, ((0, 3e-4), (2, 2.25e-3))), (QT.Q5_K, ((0, 1.6e-4), (2, 2.5e-3))),
          (QT.Q6_K, ((208, 6e-5),)), (QT.Q3_K, ((108, 1.8e-3),)))


def kquant_model(tmp_path_factory, name: str):
    path = tmp_path_factory.mktemp(f"kquant-{name}") / "tiny.gguf"
    types, fields = MODELS[name]
    write_tiny_gguf(path, TinySpec(d_model=256, ffn_dim=256, tied=False, seed=7,
                                   matrix_types=types, k_quant_scales=SCALES, **fields))
    return load_model(path, path.parent / "cache")


def assert_encodings(conv, name: str) -> None:
    w = conv.forward.recorder.w
    embed, output, layers = EXPECTED[name]
    assert (w.embed[0].qtype, w.output[0].qtype) == (embed, output)
    for layer, want in zip(w.layers, layers):
        assert (layer.qkv.qtype, layer.wo.qtype, layer.gate_up.qtype, layer.down.qtype) == want
    # What describe() reports: the GGUF's types, as ggml's does, and the encodings apart.
    stored: dict[str, int] = {}
    for t in conv.model.tensors.values():
        stored[QT(t.ggml_type).name] = stored.get(QT(t.ggml_type).name, 0) + 1
    assert w.types == stored and "Q4_K" in w.types
    assert w.encodings["embed"] == ENCODINGS[embed].name


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_step_matches_numpy(tmp_path_factory, vk_backend, name) -> None:
    """CPU shapes: chunked prefill and decode through matmul.comp and embed.comp."""
    model = kquant_model(tmp_path_factory, name)
    assert problems_running(model.config.features, model.config.arch.name)["vulkan"] is None
    want, ref = run_steps(model, None, TOKENS)
    got, conv = run_steps(model, vk_backend, TOKENS)
    assert_encodings(conv, name)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
    a, b, n = ref.arena.views(), conv.arena.views(), len(TOKENS)
    np.testing.assert_allclose(b.k_cache[:, :n], a.k_cache[:, :n], atol=ATOL, rtol=0)
    np.testing.assert_allclose(b.v_cache[:, :n], a.v_cache[:, :n], atol=ATOL, rtol=0)


@pytest.mark.parametrize("storage", [False, True], ids=["texels", "storage"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_gpu_shapes_tiled_prefill_then_decode(tmp_path_factory, backend_with, name,
                                              storage) -> None:
    """GPU shapes: the tiled products over odd chunks (matmul_tiled on lavapipe, which has no
    cooperative matrices; matmul_coopmat where the device has them, reading blocks through
    the same fetch_w8/decode_w8), then split-row decode, its inputs and weight blocks read as
    texels or as storage buffers (ssbo_inputs, ssbo_weights)."""
    tuning = replace(GPU, ssbo_inputs=storage, ssbo_weights=storage)
    assert_tiled_prefill_then_decode(kquant_model(tmp_path_factory, name), backend_with(tuning))


def test_chunks_count_super_block_texels_and_words() -> None:
    """A K6 super-block (a row of 256) is 12 texels and 5 scale words: a piece of the embedding
    holds the rows its texels allow (no encoding has more words than texels), and the chunks
    and copies count whole super-blocks."""
    info = TensorInfo(QT.Q6_K, (256, 1000), 0, 1000 * 210)
    p = Planner({"token_embd.weight": info}, 4000)
    pieces = p.matrix("token_embd.weight", pieces=True)
    assert [m.rows for m in pieces] == [333, 333, 333, 1]
    assert p.chunks == [[3996, 1665]] * 3 + [[12, 5]]
    assert [(c.first, c.count, c.encoding) for c in p.copies] == [
        (2664 * i, 2664, K6) for i in range(3)] + [(7992, 8, K6)]


@pytest.mark.parametrize("qtype", [QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.Q3_K, QT.Q5_0])
def test_a_piece_is_its_rows_of_the_whole(qtype) -> None:
    """_copy_blocks of a piece of rows (a K-quant piece starts mid-tensor, at a super-block)
    writes what encoding the whole tensor writes for those rows."""
    rows, cols = 6, 512
    blocks = random_blocks(qtype, rows * cols // GGML_QUANT_SIZES[qtype][0],
                           np.random.default_rng(3))
    raw = blocks.ravel()
    info = TensorInfo(int(qtype), (cols, rows), 0, raw.size)
    enc = ENCODINGS[SOURCES[qtype]]
    nb = cols // 32

    def copy(first: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        wq = np.zeros(enc.payload_texels(count) * 4, np.uint32)
        ws = np.zeros(enc.scale_words(count), np.uint32)
        _copy_blocks(raw, info, wq, ws, Copy("t", SOURCES[qtype], 0, 0, 0, first, count))
        return wq, ws

    whole_q, whole_s = copy(0, rows * nb)
    part_q, part_s = copy(2 * nb, 3 * nb)  # rows 2-4
    t, w = enc.payload_texels(nb) * 4, enc.scale_words(nb)
    np.testing.assert_array_equal(part_q, whole_q[2 * t : 5 * t])
    np.testing.assert_array_equal(part_s, whole_s[2 * w : 5 * w])


def test_split_q4_k_m_model_matches_unsplit(tmp_path_factory, monkeypatch, backend_with) -> None:
    """Under 8200 texels a view, the Q4_K_M model's matrices (K6X q|k|v: 6144 texels, 4608
    scale words; K4 gate|up: 4096 texels, 2560 words; K6 down: 3072 texels) take a chunk or
    two each: the offsets count super-blocks, and the run gives the unsplit logits exactly."""
    model = kquant_model(tmp_path_factory, "q4_k_m")
    whole, _ = run_steps(model, backend_with(CPU), TOKENS)
    backend = backend_with(CPU)
    lower_limits(monkeypatch, backend, 8200)
    split, conv = run_steps(model, backend, TOKENS)
    w = conv.forward.recorder.w
    assert len(w.wq) > 4
    assert all(b.size <= 16 * 8200 for b in w.wq) and all(b.size <= 4 * 8200 for b in w.ws)
    np.testing.assert_array_equal(split, whole)
