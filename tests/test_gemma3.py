"""Gemma 3 on the numpy backend: its config, its WINDOW layers through the ring's life
(prefill chunks of any size, eviction, rebase, rollback), its tokenizer and template, that
every backend takes it, and what its window layers save in memory.

tests/test_arch_reference.py holds the committed fixture to HF transformers.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pytest

from engine.backends import problems_running
from engine.conversation import Conversation
from engine.model.architecture import (
    ARCHITECTURES,
    FULL,
    WINDOW,
    query_scale,
)
from engine.model.catalog import scan
from engine.model.catalog_sources import Roots
from engine.model.config import ModelConfig
from engine.model.model import load_model
from engine.model.support import support_problem
from engine.session.session import Session
from engine.session.transcript import Transcript
from engine.state.arena import conversation_layout
from engine.state.ring_policy import RingPolicy

from .allocation_checks import assert_decode_allocates_nothing
from .parity import prefill_row_logits
from .rollback_checks import assert_undo_and_regenerate_are_exact
from .tiny_model import TinySpec, gemma_tokenizer, write_tiny_gguf

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "arch" / "gemma3.gguf"
SPM = REPO / "tests" / "fixtures" / "vocab" / "llama-spm.gguf"
# Six layers, the last global; windows of 8 tokens; wide heads; the 4B's linear scaling.
SPEC = TinySpec(architecture="gemma3", n_layers=6, head_dim=32, rope_theta=1e6,
                sliding_window=8, rope_linear_factor=8.0, tied=False)


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    return load_model(FIXTURE, tmp_path_factory.mktemp("gemma3-cache"))


def write_gemma(tmp_path: Path, name: str = "g.gguf", **overrides) -> Path:
    spec = TinySpec(**{**SPEC.__dict__, **overrides})
    return write_tiny_gguf(tmp_path / name, spec,
                           tokenizer=functools.partial(gemma_tokenizer, source=SPM))


def test_config_follows_the_gemma3_metadata(gemma) -> None:
    cfg = gemma.config
    assert cfg.kinds == (WINDOW,) * 5 + (FULL,)
    assert (cfg.window, cfg.sliding_window, cfg.n_full) == (8, 0, 1)
    assert (cfg.rope_theta, cfg.rope_theta_window, cfg.rope_freq_scale) == (1e6, 1e4, 0.125)
    assert cfg.q_dim == 128 and cfg.d_model == 64  # wide heads
    assert cfg.features == {"split_half_rope", "qk_norm", "wide_heads", "window_layers",
                            "post_norms", "geglu", "embed_scale", "f32_weights", "q8_0_weights"}
    # The window layers' RoPE: the local base, unscaled; the ring's: the global, scaled.
    assert gemma.rope_window.inv_freq[1] == pytest.approx(1e4 ** (-2 / 32))
    assert gemma.rope.inv_freq[1] == pytest.approx(0.125 * 1e6 ** (-2 / 32))
    assert cfg.q_scale == 1 / math.sqrt(32)
    # The window does not cap the ring: only the global layer's keys live there.
    assert RingPolicy.for_model(cfg).max_slots == cfg.context_length


def test_query_scale_follows_llama_cpp() -> None:
    """query_pre_attn_scalar is head_dim for Gemma 3 up to 12B and d_model / n_heads (168) for
    27B; the GGUF does not carry it, so llama.cpp keys it on the block count, as we do."""
    gemma3 = ARCHITECTURES["gemma3"]
    assert query_scale(gemma3, 62, 5376, 32, 128) == 1 / math.sqrt(168)
    assert query_scale(gemma3, 34, 2560, 8, 256) == 1 / math.sqrt(256)
    assert query_scale(ARCHITECTURES["llama"], 62, 5376, 32, 128) == 1 / math.sqrt(128)


def gemma3_metadata(**extra):
    values = {"general.architecture": "gemma3", "gemma3.block_count": 18,
              "gemma3.attention.sliding_window": 512, **extra}
    return values.get


TENSORS = ARCHITECTURES["gemma3"].model_tensors(18, tied=True, has_rope_freqs=False)


def test_support_problem_takes_gemma3_windows_and_refuses_the_rest() -> None:
    assert support_problem(gemma3_metadata(), TENSORS) is None
    assert "blk.17.post_ffw_norm.weight" in TENSORS
    assert "blk.0.post_attention_norm.weight" in TENSORS
    capped = gemma3_metadata(**{"gemma3.final_logit_softcapping": 30.0})
    assert support_problem(capped, TENSORS) == "gemma3: logit soft-capping is not implemented"
    few = gemma3_metadata(**{"gemma3.block_count": 4})
    assert "4 sliding-window layers and no global one" in support_problem(
        few, ARCHITECTURES["gemma3"].model_tensors(4, tied=True, has_rope_freqs=False))
    # Other architectures still refuse a short window: they have no WINDOW layers.
    llama = {"general.architecture": "llama", "llama.block_count": 1,
             "llama.attention.sliding_window": 512}.get
    assert "sliding-window attention (512 tokens)" in support_problem(
        llama, ARCHITECTURES["llama"].model_tensors(1, tied=True, has_rope_freqs=False))
    gemma2 = {"general.architecture": "gemma2", "gemma2.block_count": 1}.get
    assert "'gemma2' is not supported (logit soft-capping" in support_problem(gemma2, [])


def test_every_backend_runs_it(gemma, tmp_path) -> None:
    problems = problems_running(gemma.config.features, "gemma3")
    assert problems == {"numpy": None, "ggml": None, "vulkan": None}
    entries = scan(Roots(tmp_path, {"CHANNEL_MODELS": str(FIXTURE.parent)}))
    entry = next(e for e in entries if e.architecture == "gemma3")
    assert entry.supported and "window_layers" in entry.features
    assert entry.layers == "1 global layer in the ring, 5 with 8-token windows"


def test_prefill_chunks_of_any_size_match_decode(gemma) -> None:
    """A chunk's queries see the window as it was before the chunk's own rows overwrite it:
    chunks shorter than, as long as and longer than the window (with wrap-around) all give
    what one token at a time gives."""
    ids = [int(t) for t in np.random.default_rng(3).integers(4, 5000, 30)]
    conv = Conversation(gemma, RingPolicy(max_slots=64, recent_window=8, evict_batch=4,
                                          prefill_chunk=8))
    want = [conv.ingest(ids[:1]).copy()]
    want += [conv.forward.decode_one_token(t).copy() for t in ids[1:]]
    for chunk in (1, 3, 8, 13, 30):
        policy = RingPolicy(max_slots=64, recent_window=8, evict_batch=4, prefill_chunk=chunk)
        got = prefill_row_logits(gemma, ids, None, policy)
        np.testing.assert_allclose(got, np.stack(want), atol=2e-5, rtol=0, err_msg=str(chunk))


def run(model, ids: list[int], policy: RingPolicy) -> tuple[list[np.ndarray], Conversation,
                                                             int | None]:
    """Prefill 5 tokens, decode the rest; every step's logits, and the first step at which
    the ring had evicted."""
    conv = Conversation(model, policy)
    rows, first_eviction = [conv.ingest(ids[:5]).copy()], None
    for t in ids[5:]:
        rows.append(conv.forward.decode_one_token(t).copy())
        if first_eviction is None and conv.ring.evicted:
            first_eviction = len(rows) - 1
    return rows, conv, first_eviction


def rotated(keys: np.ndarray, model, shift: int) -> np.ndarray:
    """Window keys (window, kv_dim) rotated by `shift` positions with the window's RoPE."""
    cfg, rope = model.config, model.rope_window
    half = cfg.head_dim // 2
    out = keys.copy().reshape(len(keys), cfg.n_kv_heads, cfg.head_dim)
    angle = rope.inv_freq * float(shift)
    cos = np.cos(angle).astype(np.float32).reshape(1, 1, half)
    sin = np.sin(angle).astype(np.float32).reshape(1, 1, half)
    tmp = np.empty(out.shape[:-1] + (half,), np.float32)
    rope.rotate(out, cos, sin, tmp, tmp.copy())
    return out.reshape(keys.shape)


def test_window_layers_survive_eviction_and_rebase(tmp_path) -> None:
    """A 24-slot ring over a 40-token context evicts and rebases many times; a 256-token
    context holds the whole run. The five window layers come before the global one, so they
    see the same inputs either way: their planes must hold the same values, and the same
    keys up to the uniform shift rebases applied. The logits agree until the first eviction
    (the global layer then sees less), and a replay of the same run is bit for bit the same."""
    short = load_model(write_gemma(tmp_path, "short.gguf", context_length=40), tmp_path / "c1")
    full = load_model(write_gemma(tmp_path, "full.gguf", context_length=256), tmp_path / "c2")
    ids = [int(t) for t in np.random.default_rng(1).integers(4, 5000, 120)]
    small = RingPolicy(max_slots=24, recent_window=4, evict_batch=3, prefill_chunk=5)
    got, conv, evicted_at = run(short, ids, small)
    want, ref, never = run(full, ids, RingPolicy(max_slots=256, recent_window=8,
                                                       prefill_chunk=5))
    assert conv.ring.rebases >= 2 and evicted_at is not None and never is None
    assert ref.ring.rebases == 0 and conv.ring.clock == ref.ring.clock == len(ids)
    np.testing.assert_allclose(got[:evicted_at], want[:evicted_at], atol=1e-5, rtol=0)
    assert all(np.isfinite(row).all() for row in got)
    v, w = conv.arena.views(), ref.arena.views()
    np.testing.assert_allclose(v.vw_cache, w.vw_cache, atol=1e-5, rtol=0)
    shift = (conv.ring.clock - 1) - (conv.ring.next_pos - 1)  # what rebases took off
    assert shift > 0
    for plane in range(v.kw_cache.shape[0]):
        np.testing.assert_allclose(rotated(v.kw_cache[plane], short, shift), w.kw_cache[plane],
                                   atol=1e-4, rtol=0)
    again, replay, _ = run(short, ids, small)
    for name in ("kw_cache", "vw_cache", "k_cache", "v_cache"):
        np.testing.assert_array_equal(getattr(replay.arena.views(), name), getattr(v, name))
    np.testing.assert_array_equal(np.stack(again), np.stack(got))


def test_undo_and_regenerate_restore_the_window_planes(gemma, tmp_path) -> None:
    """Turns far longer than the window: an undo rolls the window planes back exactly, and a
    regenerate decodes the same reply from them."""
    session = Session(gemma, tmp_path, "s", RingPolicy().scaled_to(128))
    assert_undo_and_regenerate_are_exact(
        session, "the first message is long enough to slide the window",
        "and so is the second message, by quite a few tokens", "kw_cache")


def test_decode_allocates_nothing_through_eviction_and_rebase(tmp_path) -> None:
    model = load_model(write_gemma(tmp_path, context_length=40), tmp_path / "cache")
    assert_decode_allocates_nothing(model, vocab_top=5004)


def test_a_270m_arena_keeps_a_fraction_of_a_uniform_ring() -> None:
    """Gemma 3 270M: 18 layers, 3 global; 512-token windows; one 256-wide K/V head. Its
    K/V memory in a 4096-slot conversation against every layer keeping 4096 slots."""
    hybrid = ModelConfig(
        n_layers=18, d_model=640, n_heads=4, n_kv_heads=1, head_dim=256, ffn_dim=2048,
        vocab_size=262144, context_length=32768, rope_theta=1e6, rms_eps=1e-6,
        tied_embeddings=True, architecture="gemma3",
        layer_kinds=tuple(FULL if i % 6 == 5 else WINDOW for i in range(18)), window=512,
        rope_theta_window=1e4)
    uniform = ModelConfig(**{**hybrid.__dict__, "layer_kinds": (), "window": 0,
                             "rope_theta_window": 0.0})
    policy = RingPolicy(max_slots=4096)

    def kv_bytes(cfg: ModelConfig) -> int:
        layout = conversation_layout(cfg, policy)
        return sum(layout[name].nbytes for name in ("k_cache", "v_cache", "kw_cache",
                                                   "vw_cache") if name in layout)

    assert hybrid.n_full == 3
    assert kv_bytes(uniform) == 18 * 4096 * 256 * 8  # f32 keys and values: 151 MB
    assert kv_bytes(hybrid) == (3 * 4096 + 15 * 512) * 256 * 8  # 41 MB
    assert kv_bytes(hybrid) <= 0.30 * kv_bytes(uniform)  # 27%


def test_tokenizer_and_template_are_gemma_s(gemma) -> None:
    tok, template = gemma.tokenizer, gemma.template
    assert (tok.bos_id, tok.eos_id, tok.add_bos) == (2, 1, True)
    end_of_turn = tok.token_to_id("<end_of_turn>")
    assert tok.end_of_generation_ids == {1, end_of_turn}
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hello there"}]
    text = template.render(messages, add_generation_prompt=True)
    assert text == ("<bos><start_of_turn>user\nBe brief.\n\nHello there<end_of_turn>\n"
                    "<start_of_turn>model\n")
    ids = tok.encode(text)
    assert ids[:2] == [2, tok.token_to_id("<start_of_turn>")] and end_of_turn in ids
    assert tok.decode(tok.encode("Hello")) == "Hello"  # no SentencePiece space prefix
    assert template.default_system_prompt() is None  # the system message folds into a turn


def test_a_trimmed_reply_closes_its_turn(gemma) -> None:
    """Gemma's template trims replies; the ring keeps the sampled whitespace and the turn
    closes with what the template puts after the reply."""
    transcript = Transcript(gemma.template, gemma.tokenizer, gemma.fingerprint,
                            gemma.config.vocab_size)
    transcript.user_turn("Hi")
    tail = transcript.close_assistant(" Hello!\n")
    assert tail == gemma.tokenizer.encode("<end_of_turn>\n")
    assert transcript.rendered.endswith("<start_of_turn>model\nHello!<end_of_turn>\n")


def test_ggml_window_layers_follow_numpy_through_chunks_and_a_small_ring(gemma) -> None:
    """ggml's WINDOW layers (graph.py window_attention): prefill chunks shorter than, as long
    as and longer than the window, and decode through evictions, against numpy's
    logits within ggml's tolerance (8-bit activations, f16 keys)."""
    pytest.importorskip("ggml", reason="ggml-python is not installed (needs a C compiler)")
    from engine.backends.ggml.backend import GgmlBackend

    ggml = GgmlBackend()
    ids = [int(t) for t in np.random.default_rng(5).integers(4, 5000, 40)]
    small = RingPolicy(max_slots=24, recent_window=4, evict_batch=4, prefill_chunk=8)
    for chunk in (1, 3, 8, 13):
        policy = RingPolicy(max_slots=64, recent_window=8, evict_batch=4, prefill_chunk=chunk)
        want = prefill_row_logits(gemma, ids[:30], None, policy)
        got = prefill_row_logits(gemma, ids[:30], ggml, policy)
        np.testing.assert_allclose(got, want, atol=0.03 * np.abs(want).max(), rtol=0,
                                   err_msg=str(chunk))
    runs = []
    for backend in (None, ggml):
        conv = Conversation(gemma, small, backend=backend)
        conv.ingest(ids[:8])
        runs.append(np.stack([conv.forward.decode_one_token(t).copy() for t in ids[8:]]))
        assert conv.ring.evicted > 0
    np.testing.assert_allclose(runs[1], runs[0], atol=0.03 * np.abs(runs[0]).max(), rtol=0)


def test_ggml_decode_attends_only_the_window_rows_written_so_far(tmp_path) -> None:
    """A young conversation's window planes are written only in their first rows, and ggml's
    decode graphs attend only those (in buckets of 64 rows) until the plane fills: a
    100-token window is read as 64 rows, then 100; every step agrees with numpy's."""
    pytest.importorskip("ggml", reason="ggml-python is not installed (needs a C compiler)")
    from engine.backends.ggml.backend import GgmlBackend
    from engine.backends.ggml.forward import WINDOW_BUCKET

    model = load_model(write_gemma(tmp_path, sliding_window=100, context_length=512),
                       tmp_path / "cache")
    assert WINDOW_BUCKET < model.config.window < 2 * WINDOW_BUCKET
    ids = [int(t) for t in np.random.default_rng(11).integers(4, 5000, 140)]
    policy = RingPolicy(max_slots=256, recent_window=16, evict_batch=16, prefill_chunk=32)
    runs = []
    for backend in (None, GgmlBackend()):
        conv = Conversation(model, policy, backend=backend)
        conv.ingest(ids[:1])
        runs.append(np.stack([conv.forward.decode_one_token(t).copy() for t in ids[1:]]))
    assert sorted({rows for _, rows in conv.forward._decode}) == [64, 100]  # ggml's graphs
    np.testing.assert_allclose(runs[1], runs[0], atol=0.03 * np.abs(runs[0]).max(), rtol=0)
