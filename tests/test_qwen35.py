"""Qwen3.5 (`qwen35`) on the numpy backend: its config and tensors by layer kind, the fixture
against transformers' qwen3_5 in float32, its DELTA layers' recurrent state through the
ring's life (prefill chunks of any size, eviction, rebase, reset, undo, regenerate, fork,
warm boot), its tokenizer and thinking template, and what the other backends and the catalog
say.

tests/fixtures/arch/qwen35.gguf and its reference logits come from
scripts/make_arch_reference.py (transformers built over the GGUF's weights by
scripts/qwen35_reference.py); nothing here needs torch.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from engine.backends import problems_running
from engine.conversation import Conversation
from engine.model.architecture import ARCHITECTURES, DELTA, FULL
from engine.model.catalog import scan
from engine.model.catalog_sources import Roots
from engine.model.gguf_file import open_model
from engine.model.model import load_model
from engine.model.support import support_problem
from engine.session.fork import fork_session
from engine.session.session import Session
from engine.state.ring_policy import RingPolicy
from engine.state.sampler import SamplingSettings

from .allocation_checks import assert_decode_allocates_nothing
from .parity import prefill_row_logits, run_noting_eviction
from .rollback_checks import assert_undo_and_regenerate_are_exact
from .tiny_model import TinySpec, write_tiny_gguf
from .tiny_qwen35 import qwen35_tokenizer

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "arch"
FIXTURE = FIXTURES / "qwen35.gguf"
QWEN2 = REPO / "tests" / "fixtures" / "vocab" / "qwen2.gguf"
KINDS = (DELTA, DELTA, DELTA, FULL)
SPEC = TinySpec(architecture="qwen35", n_layers=4, head_dim=32, rope_dim=8, rope_theta=1e7,
                conv_kernel=4, delta_heads=(2, 4, 16), nextn=1, tied=False)
POLICY = RingPolicy(max_slots=64, recent_window=8, evict_batch=4, prefill_chunk=8)
GREEDY = SamplingSettings()


@pytest.fixture(scope="module")
def qwen35(tmp_path_factory):
    return load_model(FIXTURE, tmp_path_factory.mktemp("qwen35-cache"))


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    with np.load(FIXTURES / "reference.npz") as data:
        return {k.split("/", 1)[1]: data[k] for k in data.files if k.startswith("qwen35/")}


def write_qwen35(tmp_path: Path, name: str = "q.gguf", **overrides) -> Path:
    spec = TinySpec(**{**SPEC.__dict__, **overrides})
    return write_tiny_gguf(tmp_path / name, spec,
                           tokenizer=functools.partial(qwen35_tokenizer, source=QWEN2))


def test_config_and_weights_follow_the_qwen35_metadata(qwen35) -> None:
    cfg = qwen35.config
    assert cfg.kinds == KINDS and cfg.n_layers == 4  # block_count 5: the MTP block is not run
    assert (cfg.rotary_dim, cfg.head_dim, cfg.conv_kernel) == (8, 32, 4)
    assert (cfg.delta_k_heads, cfg.delta_v_heads, cfg.delta_head_dim) == (2, 4, 16)
    assert cfg.features == {"split_half_rope", "qk_norm", "wide_heads", "gated_query",
                            "partial_rotary", "delta_layers", "f32_weights", "q8_0_weights"}
    delta, attention = qwen35.weights.layers[0], qwen35.weights.layers[3]
    assert delta.wqkv is None and delta.conv_in is None
    assert (delta.delta_in.shape, delta.delta_conv.shape, delta.delta_out.shape) == (
        (128 + 64 + 8, 64), (128, 4), (64, 64))
    # The gated query's rows: q | k | v, then the gates, each head's taken from attn_q.
    assert attention.wqkv.shape == (2 * 128 + 2 * 64, 64) and attention.delta_in is None
    gguf = open_model(FIXTURE)
    q_gate = gguf.tensor("blk.3.attn_q.weight")
    assert tuple(q_gate.shape) == (64, 256)
    # The pre-FFN norm is the GGUF's post_attention_norm.
    np.testing.assert_array_equal(
        attention.ffn_norm, np.asarray(gguf.tensor("blk.3.post_attention_norm.weight").data))
    v = Conversation(qwen35).arena.views()
    assert v.delta_conv.shape == (3, 3, 128) and v.delta_state.shape == (3, 4, 16, 16)
    assert v.k_cache.shape[0] == 1  # the ring holds the one attention layer's keys


def test_the_table_lists_tensors_by_layer_kind() -> None:
    arch = ARCHITECTURES["qwen35"]
    assert arch.layer_tensors(0, DELTA) == [
        "blk.0.attn_norm.weight", "blk.0.post_attention_norm.weight", "blk.0.ffn_down.weight",
        "blk.0.ffn_up.weight", "blk.0.ffn_gate.weight", "blk.0.attn_qkv.weight",
        "blk.0.attn_gate.weight", "blk.0.ssm_conv1d.weight", "blk.0.ssm_dt.bias",
        "blk.0.ssm_a", "blk.0.ssm_beta.weight", "blk.0.ssm_alpha.weight",
        "blk.0.ssm_norm.weight", "blk.0.ssm_out.weight"]
    assert "blk.3.attn_q_norm.weight" in arch.layer_tensors(3, FULL)


def qwen35_metadata(**extra):
    values = {"general.architecture": "qwen35", "qwen35.block_count": 4,
              "qwen35.attention.head_count_kv": 2, "qwen35.ssm.conv_kernel": 4,
              "qwen35.ssm.state_size": 16, "qwen35.ssm.group_count": 2,
              "qwen35.ssm.time_step_rank": 4, "qwen35.ssm.inner_size": 64, **extra}
    return values.get


TENSORS = ARCHITECTURES["qwen35"].model_tensors(4, tied=True, has_rope_freqs=False, kinds=KINDS)


@pytest.mark.parametrize(("extra", "names", "reason"), [
    ({}, TENSORS, None),
    ({"qwen35.block_count": 5, "qwen35.nextn_predict_layers": 1},
     TENSORS + ["blk.4.nextn.eh_proj.weight", "blk.4.attn_q.weight"], None),
    ({"general.architecture": "qwen35moe"}, TENSORS,
     "architecture 'qwen35moe' is not supported (mixture-of-experts layers are not implemented"),
    ({"qwen35.ssm.group_count": None}, TENSORS, "'qwen35.ssm.group_count' (key heads) is not"),
    ({"qwen35.ssm.time_step_rank": 3, "qwen35.ssm.inner_size": 48}, TENSORS,
     "3 value heads over 2 key heads are not implemented"),
    ({"qwen35.ssm.inner_size": 32}, TENSORS, "value heads narrower or wider than key heads"),
    ({"qwen35.full_attention_interval": 8}, TENSORS,
     "4 delta-net layers and no global one are not implemented"),
    ({}, [n for n in TENSORS if n != "blk.1.ssm_a"], "missing tensor 'blk.1.ssm_a'"),
    ({}, TENSORS + ["blk.0.attn_q.weight"], "tensor 'blk.0.attn_q.weight' is not part of qwen35"),
])
def test_support_problem_reads_the_delta_geometry(extra, names, reason) -> None:
    problem = support_problem(qwen35_metadata(**extra), names)
    assert problem is None if reason is None else reason in problem


def subset_error(got: np.ndarray, reference: dict) -> float:
    return float(np.abs(got[:, reference["subset"]] - reference["subset_logits"]).max())


def test_numpy_matches_transformers_on_prefill_decode_and_greedy(qwen35, reference) -> None:
    """Both sides compute in float32 over the same dequantized weights: within 1e-3 of
    transformers at every position, through the prefill (every row) and decode paths, and
    the same 16 greedy tokens."""
    ids = [int(t) for t in reference["ids"]]
    prefill = prefill_row_logits(qwen35, ids, None, POLICY)
    conv = Conversation(qwen35, POLICY)
    rows = [conv.ingest(ids[:1]).copy()]
    rows += [conv.forward.decode_one_token(t).copy() for t in ids[1:]]
    decode = np.stack(rows)
    assert subset_error(prefill, reference) <= 1e-3
    assert subset_error(decode, reference) <= 1e-3
    assert list(prefill.argmax(axis=1)) == list(reference["argmax"])
    conv = Conversation(qwen35, POLICY)
    logits, out = conv.ingest(ids), []
    for _ in range(len(reference["greedy"])):
        out.append(int(np.argmax(logits)))
        logits = conv.forward.decode_one_token(out[-1])
    assert out == [int(t) for t in reference["greedy"]]


def one_token_at_a_time(model, ids: list[int]) -> tuple[np.ndarray, Conversation]:
    conv = Conversation(model, RingPolicy(max_slots=32, recent_window=8, evict_batch=4,
                                          prefill_chunk=8))
    rows = [conv.ingest(ids[:1]).copy()]
    rows += [conv.forward.decode_one_token(t).copy() for t in ids[1:]]
    return np.stack(rows), conv


def test_prefill_chunks_of_any_size_match_decode(qwen35) -> None:
    """The delta rule runs token by token inside a chunk, after the convolution's carry:
    chunks of 1, 3 (the carry's length), 4 (the kernel's), 8, 13 and the whole input give
    what one token at a time gives, and leave the same states."""
    ids = [int(t) for t in np.random.default_rng(3).integers(0, 4500, 30)]
    want, ref = one_token_at_a_time(qwen35, ids)
    for chunk in (1, 3, 4, 8, 13, 30):
        policy = RingPolicy(max_slots=64, recent_window=8, evict_batch=4, prefill_chunk=chunk)
        got = prefill_row_logits(qwen35, ids, None, policy)
        np.testing.assert_allclose(got, want, atol=2e-5, rtol=0, err_msg=str(chunk))
        conv = Conversation(qwen35, policy)
        conv.ingest(ids)
        # 1e-5: a chunk's projections are one GEMM where single tokens are GEMVs, which
        # OpenBLAS sums in another order (1.07e-6 apart on AVX-512 with numpy 2.4's build);
        # a wrong carry or state differs by tenths.
        for name in ("delta_conv", "delta_state"):
            np.testing.assert_allclose(getattr(conv.arena.views(), name),
                                       getattr(ref.arena.views(), name), atol=1e-5, rtol=0,
                                       err_msg=f"{name}, chunks of {chunk}")


def test_eviction_and_rebase_never_touch_the_recurrent_state(tmp_path) -> None:
    """A 24-slot ring over a 40-token context evicts and rebases many times; a 256-token
    context holds the whole run. The logits agree until the first eviction (the attention
    layer then sees less). The three delta layers before the attention layer see the
    tokens alone, so their states and carries are exactly those of the run that never
    evicted: the ring's policy never reaches them."""
    short = load_model(write_qwen35(tmp_path, "short.gguf", context_length=40), tmp_path / "c1")
    full = load_model(write_qwen35(tmp_path, "full.gguf", context_length=256), tmp_path / "c2")
    ids = [int(t) for t in np.random.default_rng(1).integers(0, 4500, 120)]
    small = RingPolicy(max_slots=24, recent_window=4, evict_batch=3, prefill_chunk=5)
    got, conv, evicted_at = run_noting_eviction(short, ids, small)
    want, ref, never = run_noting_eviction(
        full, ids, RingPolicy(max_slots=256, recent_window=8, prefill_chunk=5))
    assert conv.ring.rebases >= 2 and evicted_at is not None and never is None
    np.testing.assert_allclose(got[:evicted_at], want[:evicted_at], atol=1e-5, rtol=0)
    assert all(np.isfinite(row).all() for row in got)
    for name in ("delta_conv", "delta_state"):
        np.testing.assert_array_equal(getattr(conv.arena.views(), name),
                                      getattr(ref.arena.views(), name), err_msg=name)


def test_reset_forgets_the_recurrent_state(qwen35) -> None:
    ids = [int(t) for t in np.random.default_rng(5).integers(0, 4500, 12)]
    conv = Conversation(qwen35)
    first = conv.ingest(ids).copy()
    conv.ingest(ids[:5])
    conv.reset()
    v = conv.arena.views()
    assert not v.delta_state.any() and not v.delta_conv.any()
    np.testing.assert_array_equal(conv.ingest(ids), first)


def test_undo_and_regenerate_restore_the_recurrent_state(qwen35, tmp_path) -> None:
    session = Session(qwen35, tmp_path, "s", RingPolicy().scaled_to(128))
    assert_undo_and_regenerate_are_exact(session, "the first message",
                                         "and the second message", "delta_state")


def test_a_fork_and_a_warm_boot_give_the_same_next_reply(qwen35, tmp_path) -> None:
    """A snapshot keeps the recurrent state exactly: a fork boots warm from it (not by
    replaying) with every plane bit for bit, and gives the reply the saving process gives."""
    policy = RingPolicy(max_slots=96, recent_window=8, evict_batch=8, prefill_chunk=16)
    live = Session(qwen35, tmp_path, "live", policy)
    live.boot()
    live.turn("Tell me about the sea, in a few words.", GREEDY, max_tokens=12)
    assert live.save().status.name == "SAVED"
    fork_session(tmp_path, "live", "forked")
    forked = Session(qwen35, tmp_path, "forked", policy)
    report = forked.boot()
    assert report.kind == "warm" and report.replayed_events == 0
    for name in ("delta_conv", "delta_state"):
        np.testing.assert_array_equal(getattr(forked.conversation.arena.views(), name),
                                      getattr(live.conversation.arena.views(), name))
    want = live.turn("And the mountains?", GREEDY, max_tokens=12)
    got = forked.turn("And the mountains?", GREEDY, max_tokens=12)
    assert got.reply_ids == want.reply_ids and len(want.reply_ids) > 0


def test_decode_allocates_nothing_through_eviction_and_rebase(tmp_path) -> None:
    model = load_model(write_qwen35(tmp_path, context_length=40), tmp_path / "cache")
    assert_decode_allocates_nothing(model, vocab_top=4004)


def test_tokenizer_and_thinking_template(qwen35) -> None:
    tok, template = qwen35.tokenizer, qwen35.template
    assert len(tok.encode("<think>")) == 1 and len(tok.encode("</think>")) == 1
    prompt = template.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")
    # A past reply is rendered without its reasoning.
    history = template.render([{"role": "user", "content": "Hi"},
                               {"role": "assistant", "content": "hmm</think>\n\nHello"}],
                              add_generation_prompt=False)
    assert history.endswith("<|im_start|>assistant\nHello<|im_end|>\n")


def test_other_backends_and_the_catalog(qwen35, tmp_path) -> None:
    problems = problems_running(qwen35.config.features, "qwen35")
    assert problems == {"numpy": None, "ggml": None, "vulkan": None}
    entries = scan(Roots(tmp_path, {"CHANNEL_MODELS": str(FIXTURES)}))
    entry = next(e for e in entries if e.architecture == "qwen35")
    assert entry.supported and "delta_layers" in entry.features
    assert entry.layers == "1 global layer in the ring, 3 with delta-rule states"
