"""The numpy forward pass against an independent float64 implementation, on tiny models."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from engine.conversation import Conversation
from engine.model.model import load_model
from engine.state.ring_policy import RingPolicy

from . import naive_llama
from .tiny_model import TinySpec, write_tiny_gguf

TOKENS = [1, 40, 77, 200, 13, 99, 5, 250, 31, 64, 128, 7, 8, 9, 180, 44, 2, 1, 66, 67]


def engine_logits_by_decode(model, ids, policy=None):
    conv = Conversation(model, policy or RingPolicy().scaled_to(64))
    rows = [conv.ingest(ids[:1]).copy()]
    for t in ids[1:]:
        rows.append(conv.forward.decode_one_token(t).copy())
    return np.stack(rows), conv


def test_decode_matches_naive_reference(tiny_model, tiny_gguf) -> None:
    hp, w = naive_llama.load(tiny_gguf)
    expected = naive_llama.logits(hp, w, TOKENS)
    got, _ = engine_logits_by_decode(tiny_model, TOKENS)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=2e-4, rtol=0)


def test_prefill_in_chunks_matches_reference_at_every_row(tiny_model, tiny_gguf) -> None:
    hp, w = naive_llama.load(tiny_gguf)
    expected = naive_llama.logits(hp, w, TOKENS)
    policy = RingPolicy(max_slots=64, recent_window=8, evict_batch=4, prefill_chunk=6)
    conv = Conversation(tiny_model, policy)
    rows = []
    out_w = tiny_model.weights.output
    conv.ingest(TOKENS, on_hidden=lambda h: rows.append(h @ out_w.T))
    got = np.concatenate(rows)
    np.testing.assert_allclose(got, expected, atol=2e-4, rtol=0)
    np.testing.assert_allclose(conv.arena.views().logits, expected[-1], atol=2e-4, rtol=0)


def test_prefill_then_decode_equals_all_decode(tiny_model) -> None:
    by_decode, conv_a = engine_logits_by_decode(tiny_model, TOKENS)
    conv_b = Conversation(tiny_model, RingPolicy().scaled_to(64))
    conv_b.ingest(TOKENS[:12])
    for t in TOKENS[12:]:
        last = conv_b.forward.decode_one_token(t)
    np.testing.assert_allclose(last, by_decode[-1], atol=1e-5)
    va, vb = conv_a.arena.views(), conv_b.arena.views()
    n = len(TOKENS)
    np.testing.assert_allclose(va.k_cache[:, :n], vb.k_cache[:, :n], atol=1e-5)
    assert list(va.slot_pos[:n]) == list(range(n)) == list(vb.slot_pos[:n])


@pytest.mark.parametrize("qtype", [QT.F16, QT.BF16, QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1])
def test_quantized_tensor_types_load_and_match_reference(tmp_path, qtype) -> None:
    path = write_tiny_gguf(tmp_path / f"tiny-{qtype.name}.gguf", TinySpec(tensor_type=qtype))
    model = load_model(path, tmp_path / "cache")
    hp, w = naive_llama.load(path)  # dequantized independently, by gguf-py
    expected = naive_llama.logits(hp, w, TOKENS[:8])
    got, _ = engine_logits_by_decode(model, TOKENS[:8])
    np.testing.assert_allclose(got, expected, atol=2e-4, rtol=0)


@pytest.mark.parametrize("qtype", [QT.Q4_K, QT.Q5_K, QT.Q6_K])
def test_k_quant_models_load_and_match_reference(tmp_path, qtype) -> None:
    # K-quants need rows that are multiples of 256; the norms and the embedding stay F32-like.
    spec = TinySpec(d_model=256, n_heads=4, n_kv_heads=2, ffn_dim=256, tensor_type=qtype, seed=4)
    path = write_tiny_gguf(tmp_path / f"tiny-{qtype.name}.gguf", spec)
    model = load_model(path, tmp_path / "cache")
    hp, w = naive_llama.load(path)
    expected = naive_llama.logits(hp, w, TOKENS[:6])
    assert np.abs(expected).max() > 1e-3  # the random blocks carry real weights
    got, _ = engine_logits_by_decode(model, TOKENS[:6])
    np.testing.assert_allclose(got, expected, atol=2e-4, rtol=1e-4)


def test_untied_output_matrix_is_used(tmp_path) -> None:
    path = write_tiny_gguf(tmp_path / "untied.gguf", TinySpec(tied=False, seed=3))
    model = load_model(path, tmp_path / "cache")
    assert not model.config.tied_embeddings
    assert model.weights.output is not model.weights.token_embd
    hp, w = naive_llama.load(path)
    got, _ = engine_logits_by_decode(model, TOKENS[:6])
    np.testing.assert_allclose(got, naive_llama.logits(hp, w, TOKENS[:6]), atol=2e-4, rtol=0)


def test_decode_keeps_float32_everywhere(tiny_model) -> None:
    _, conv = engine_logits_by_decode(tiny_model, TOKENS[:4])
    v = conv.arena.views()
    for name in ("x", "xn", "qkv", "attn", "logits", "k_cache", "slot_salience"):
        assert getattr(v, name).dtype == np.float32, name
