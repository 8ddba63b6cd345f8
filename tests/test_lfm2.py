"""LFM2 on the numpy backend: its config and tensors by layer kind, its CONV layers' carry
through the ring's life (prefill chunks of any size, eviction, rebase, rollback, reset), its
tokenizer and template, and what the other backends and the catalog say.

tests/test_arch_reference.py holds the committed fixture to HF transformers.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.backends import problems_running
from engine.backends.ggml.lib import available as ggml_available
from engine.conversation import Conversation
from engine.model.architecture import ARCHITECTURES, CONV, FULL
from engine.model.catalog import scan
from engine.model.catalog_sources import Roots
from engine.model.gguf_file import open_model
from engine.model.model import load_model
from engine.model.pretokenizers import pre_tokenizer_spec
from engine.model.support import support_problem
from engine.session.session import Session
from engine.state.ring_policy import RingPolicy

from .allocation_checks import assert_decode_allocates_nothing
from .parity import prefill_row_logits, run_noting_eviction
from .rollback_checks import assert_undo_and_regenerate_are_exact
from .tiny_model import TinySpec, lfm2_tokenizer, write_tiny_gguf

GGML_PROBLEM = ggml_available()  # None where ggml is built

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "arch" / "lfm2.gguf"
QWEN2 = REPO / "tests" / "fixtures" / "vocab" / "qwen2.gguf"
KINDS = (CONV, CONV, FULL, CONV)
SPEC = TinySpec(architecture="lfm2", n_layers=4, layer_kinds=KINDS, conv_kernel=3,
                rope_theta=1e6, tied=False)


@pytest.fixture(scope="module")
def lfm2(tmp_path_factory):
    return load_model(FIXTURE, tmp_path_factory.mktemp("lfm2-cache"))


def write_lfm2(tmp_path: Path, name: str = "l.gguf", **overrides) -> Path:
    spec = TinySpec(**{**SPEC.__dict__, **overrides})
    return write_tiny_gguf(tmp_path / name, spec,
                           tokenizer=functools.partial(lfm2_tokenizer, source=QWEN2))


def test_config_and_weights_follow_the_lfm2_metadata(lfm2) -> None:
    cfg = lfm2.config
    assert cfg.kinds == KINDS and cfg.conv_kernel == 3 and cfg.n_full == 1
    assert (cfg.n_heads, cfg.n_kv_heads, cfg.window, cfg.sliding_window) == (4, 2, 0, 0)
    assert cfg.features == {"split_half_rope", "qk_norm", "conv_layers",
                            "f32_weights", "q8_0_weights"}  # and the tensor types it reads
    conv, attention = lfm2.weights.layers[0], lfm2.weights.layers[2]
    assert conv.wqkv is None and conv.q_norm is None
    assert (conv.conv_in.shape, conv.conv_weight.shape, conv.conv_out.shape) == (
        (192, 64), (64, 3), (64, 64))
    assert attention.conv_in is None and attention.wqkv.shape == (128, 64)
    reader = open_model(FIXTURE)
    np.testing.assert_array_equal(  # the final norm is LFM2's token_embd_norm
        lfm2.weights.output_norm, np.asarray(reader.tensor("token_embd_norm.weight").data))
    # The ring holds the attention layer's keys only; each conv layer keeps two inputs.
    conv_state = Conversation(lfm2).arena.views().conv_state
    assert conv_state.shape == (3, 2, 64)


def test_the_weight_image_is_built_once_and_mapped_after(tmp_path) -> None:
    first = load_model(FIXTURE, tmp_path)
    second = load_model(FIXTURE, tmp_path)
    assert first.image_built and not second.image_built
    assert second.config == first.config
    for a, b in zip(first.weights.layers, second.weights.layers):
        for name in ("conv_in", "conv_weight", "conv_out", "wqkv", "q_norm"):
            if getattr(a, name) is None:
                assert getattr(b, name) is None
            else:
                np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_the_table_lists_tensors_by_layer_kind() -> None:
    lfm2 = ARCHITECTURES["lfm2"]
    assert lfm2.layer_tensors(0, CONV) == [
        "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "blk.0.ffn_down.weight",
        "blk.0.ffn_up.weight", "blk.0.ffn_gate.weight", "blk.0.shortconv.in_proj.weight",
        "blk.0.shortconv.conv.weight", "blk.0.shortconv.out_proj.weight"]
    assert "blk.2.attn_k_norm.weight" in lfm2.layer_tensors(2, FULL)
    names = lfm2.model_tensors(4, tied=True, has_rope_freqs=False, kinds=KINDS)
    assert names[:2] == ["token_embd.weight", "token_embd_norm.weight"]
    # Every other architecture's layers are unchanged by the kinds' default.
    llama = ARCHITECTURES["llama"]
    assert llama.model_tensors(2, True, False) == llama.model_tensors(2, True, False, (FULL,) * 2)


def lfm2_metadata(**extra):
    values = {"general.architecture": "lfm2", "lfm2.block_count": 4,
              "lfm2.attention.head_count_kv": [0, 0, 8, 0], "lfm2.shortconv.l_cache": 3,
              **extra}
    return values.get


TENSORS = ARCHITECTURES["lfm2"].model_tensors(4, tied=True, has_rope_freqs=False, kinds=KINDS)


@pytest.mark.parametrize(("extra", "names", "reason"), [
    ({}, TENSORS, None),
    ({"general.architecture": "lfm2moe"}, TENSORS,
     "architecture 'lfm2moe' is not supported (mixture-of-experts layers are not implemented)"),
    ({"lfm2.attention.head_count_kv": [0, 8, 4, 0]}, TENSORS,
     "attention layers with different K/V head counts (4, 8) are not implemented"),
    ({"lfm2.attention.head_count_kv": [0, 8]}, TENSORS, "is neither a count nor one per layer"),
    ({"lfm2.attention.sliding_window": 512}, TENSORS,
     "lfm2: 1 sliding-window layers, 3 short-convolution layers and no global one"),
    ({"lfm2.attention.head_count_kv": [0, 0, 0, 0]}, TENSORS,
     "lfm2: 4 short-convolution layers and no global one are not implemented"),
    ({"lfm2.shortconv.l_cache": None}, TENSORS, "'lfm2.shortconv.l_cache' is not a kernel"),
    ({}, [n for n in TENSORS if n != "token_embd_norm.weight"] + ["output_norm.weight"],
     "missing tensor 'token_embd_norm.weight'"),
    ({}, TENSORS + ["blk.0.attn_q.weight"], "tensor 'blk.0.attn_q.weight' is not part of lfm2"),
    ({}, [n for n in TENSORS if "blk.3.shortconv.conv" not in n],
     "missing tensor 'blk.3.shortconv.conv.weight'"),
])
def test_support_problem_reads_the_layer_kinds(extra, names, reason) -> None:
    problem = support_problem(lfm2_metadata(**extra), names)
    assert problem == reason if reason is None else reason in problem


def test_every_backend_runs_it(lfm2, tmp_path) -> None:
    problems = problems_running(lfm2.config.features, "lfm2")
    assert problems == {"numpy": None, "ggml": None, "vulkan": None}
    entries = scan(Roots(tmp_path, {"CHANNEL_MODELS": str(FIXTURE.parent)}))
    entry = next(e for e in entries if e.architecture == "lfm2")
    assert entry.supported and "conv_layers" in entry.features
    kinds = entry.layers.split(", ")
    assert kinds[0].endswith("in the ring") and kinds[1].endswith("with conv carries")
    llama = {"general.architecture": "llama", "llama.block_count": 2,
             "llama.attention.head_count_kv": [0, 8]}.get
    assert "layers without K/V heads" in support_problem(
        llama, ARCHITECTURES["llama"].model_tensors(2, tied=True, has_rope_freqs=False))


def one_token_at_a_time(model, ids: list[int]) -> tuple[np.ndarray, Conversation]:
    conv = Conversation(model, RingPolicy(max_slots=32, recent_window=8, evict_batch=4,
                                          prefill_chunk=8))
    rows = [conv.ingest(ids[:1]).copy()]
    rows += [conv.forward.decode_one_token(t).copy() for t in ids[1:]]
    return np.stack(rows), conv


def test_prefill_chunks_of_any_size_match_decode(lfm2) -> None:
    """A chunk convolves its own rows after the carry, whatever its length against the
    kernel's: chunks of 1, 2 (the carry's length), 3 (the kernel's), 8, 13 and the whole
    input give what one token at a time gives, and leave the same carries."""
    ids = [int(t) for t in np.random.default_rng(3).integers(0, 4500, 30)]
    want, ref = one_token_at_a_time(lfm2, ids)
    for chunk in (1, 2, 3, 8, 13, 30):
        policy = RingPolicy(max_slots=64, recent_window=8, evict_batch=4, prefill_chunk=chunk)
        got = prefill_row_logits(lfm2, ids, None, policy)
        np.testing.assert_allclose(got, want, atol=2e-5, rtol=0, err_msg=str(chunk))
        conv = Conversation(lfm2, policy)
        conv.ingest(ids)
        np.testing.assert_allclose(conv.arena.views().conv_state, ref.arena.views().conv_state,
                                   atol=1e-6, rtol=0, err_msg=str(chunk))


def test_conv_layers_survive_eviction_and_rebase(tmp_path) -> None:
    """A 24-slot ring over a 40-token context evicts and rebases many times; a 256-token
    context holds the whole run. The logits agree until the first eviction (the attention
    layer then sees less), and a replay is bit for bit the same. The two conv layers before
    the attention layer see the tokens alone, so their carries are what a fresh
    conversation of the run's last four tokens leaves (layer 0 reads two tokens back, layer
    1 two more): eviction and rebase never touched them."""
    short = load_model(write_lfm2(tmp_path, "short.gguf", context_length=40), tmp_path / "c1")
    full = load_model(write_lfm2(tmp_path, "full.gguf", context_length=256), tmp_path / "c2")
    ids = [int(t) for t in np.random.default_rng(1).integers(0, 4500, 120)]
    small = RingPolicy(max_slots=24, recent_window=4, evict_batch=3, prefill_chunk=5)
    got, conv, evicted_at = run_noting_eviction(short, ids, small)
    want, ref, never = run_noting_eviction(
        full, ids, RingPolicy(max_slots=256, recent_window=8, prefill_chunk=5))
    assert conv.ring.rebases >= 2 and evicted_at is not None and never is None
    assert ref.ring.rebases == 0 and conv.ring.clock == ref.ring.clock == len(ids)
    np.testing.assert_allclose(got[:evicted_at], want[:evicted_at], atol=1e-5, rtol=0)
    assert all(np.isfinite(row).all() for row in got)
    carries = conv.arena.views().conv_state
    _, fresh = one_token_at_a_time(short, ids[-4:])
    np.testing.assert_allclose(carries[:2], fresh.arena.views().conv_state[:2], atol=1e-6,
                               rtol=0)
    np.testing.assert_allclose(carries[:2], ref.arena.views().conv_state[:2], atol=1e-6,
                               rtol=0)
    again, replay, _ = run_noting_eviction(short, ids, small)
    for name in ("conv_state", "k_cache", "v_cache"):
        np.testing.assert_array_equal(getattr(replay.arena.views(), name),
                                      getattr(conv.arena.views(), name))
    np.testing.assert_array_equal(np.stack(again), np.stack(got))


def test_reset_forgets_the_carries(lfm2) -> None:
    """A reset conversation starts from zero carries, as a new one does (the carry is read
    from the first token on, unlike window rows, which their clocks mask)."""
    ids = [int(t) for t in np.random.default_rng(5).integers(0, 4500, 12)]
    conv = Conversation(lfm2)
    first = conv.ingest(ids).copy()
    conv.ingest(ids[:5])
    conv.reset()
    assert not conv.arena.views().conv_state.any()
    np.testing.assert_array_equal(conv.ingest(ids), first)


def test_undo_and_regenerate_restore_the_carries(lfm2, tmp_path) -> None:
    """An undo rolls the conv carries back exactly, and a regenerate decodes the same reply
    from them."""
    session = Session(lfm2, tmp_path, "s", RingPolicy().scaled_to(128))
    assert_undo_and_regenerate_are_exact(session, "the first message",
                                         "and the second message", "conv_state")


def test_decode_allocates_nothing_through_eviction_and_rebase(tmp_path) -> None:
    model = load_model(write_lfm2(tmp_path, context_length=40), tmp_path / "cache")
    assert_decode_allocates_nothing(model, vocab_top=4004)


TEXTS = ["Hello, world!", "Numbers: 1234567 and 3.14159", "  leading spaces\n\ttabs",
         "naïve café — 東京 🙂", "don't you'll WE'RE", "<|im_start|>not special here"]


def test_tokenizer_and_template_are_lfm2_s(lfm2) -> None:
    tok, template = lfm2.tokenizer, lfm2.template
    bos, im_end = tok.token_to_id("<|startoftext|>"), tok.token_to_id("<|im_end|>")
    assert (tok.bos_id, tok.eos_id, tok.add_bos) == (bos, im_end, True)
    assert tok.end_of_generation_ids == {im_end, tok.token_to_id("<|endoftext|>")}
    # llama.cpp groups lfm2 with llama3 (tests/test_tokenizer_kinds.py checks its ids), and
    # that pre-tokenizer round-trips qwen2's vocabulary, which the fixture borrows.
    assert open_model(FIXTURE).field("tokenizer.ggml.pre") == "lfm2"
    assert pre_tokenizer_spec("lfm2") is pre_tokenizer_spec("llama3")
    for text in TEXTS:
        assert tok.decode(tok.encode(text)) == text
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hello there"}]
    text = template.render(messages, add_generation_prompt=True)
    assert text == ("<|startoftext|><|im_start|>system\nBe brief.<|im_end|>\n"
                    "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n")
    ids = tok.encode(text)
    assert ids[:2] == [bos, tok.token_to_id("<|im_start|>")] and im_end in ids
    assert template.default_system_prompt() is None


def test_a_session_moves_between_numpy_and_ggml(tmp_path) -> None:
    """A snapshot saved on one backend restores on the other (conv carries included): the
    second turn, on ggml, boots warm from what numpy saved."""
    def chat(backend: str, text: str) -> dict:
        ran = subprocess.run(
            [sys.executable, "-m", "channel_cli.cli", "chat", "--json", "--max-tokens", "3",
             "--temperature", "0",  # greedy: the replies these checks were written for
             "--model", str(FIXTURE), "--data-dir", str(tmp_path / "data"),
             "--cache-dir", str(tmp_path / "cache"), "--backend", backend, text],
            capture_output=True, text=True, cwd=REPO, timeout=300)
        assert ran.returncode == 0, ran.stderr
        return json.loads(ran.stdout)

    first = chat("numpy", "Hi")
    assert 1 <= len(first["reply_ids"]) <= 3
    if GGML_PROBLEM is None:
        assert chat("ggml", "And you?")["boot"] == "warm"


def test_ggml_carries_follow_numpy_through_chunks_and_a_small_ring(lfm2) -> None:
    """ggml's CONV layers (graph.py short_conv, ssm_conv over the carry): prefill chunks of
    every size and decode through evictions, against numpy within ggml's tolerance (8-bit
    activations); the carries stay within it too."""
    if GGML_PROBLEM is not None:
        pytest.skip(f"ggml is not built here: {GGML_PROBLEM}")
    from engine.backends.ggml.backend import GgmlBackend

    ggml = GgmlBackend()
    ids = [int(t) for t in np.random.default_rng(9).integers(4, 1000, 40)]
    for chunk in (1, 3, 8, 13):
        policy = RingPolicy(max_slots=64, recent_window=8, evict_batch=4, prefill_chunk=chunk)
        want = prefill_row_logits(lfm2, ids[:30], None, policy)
        got = prefill_row_logits(lfm2, ids[:30], ggml, policy)
        np.testing.assert_allclose(got, want, atol=0.03 * np.abs(want).max(), rtol=0,
                                   err_msg=str(chunk))
    small = RingPolicy(max_slots=24, recent_window=4, evict_batch=4, prefill_chunk=8)
    runs, carries = [], []
    for backend in (None, ggml):
        conv = Conversation(lfm2, small, backend=backend)
        conv.ingest(ids[:8])
        runs.append(np.stack([conv.forward.decode_one_token(t).copy() for t in ids[8:]]))
        carries.append(conv.arena.views().conv_state.copy())
        assert conv.ring.evicted > 0
    np.testing.assert_allclose(runs[1], runs[0], atol=0.03 * np.abs(runs[0]).max(), rtol=0)
    np.testing.assert_allclose(carries[1], carries[0], atol=0.03 * np.abs(carries[0]).max())
