"""The architecture features the Vulkan backend implements (split-half RoPE, QKV bias, QK-norm,
wide heads, fused QKV and gate/up, LFM2's short-convolution layers, Gemma 3's window layers,
post-norms, GeGLU and scales), held to the numpy backend on tiny random-weight models of each
family: every decode step, chunked prefill under the CPU shapes (matmul.comp) and tiled
prefill under the GPU shapes (matmul_tiled), the K/V planes (and conv carries, window planes)
in numpy's layout, and no dispatch beyond llama's but QK-norm's one a layer and post-norms'
one a residual add.

tests/test_arch_reference.py holds the same families to transformers on the committed
fixtures; tests/test_vulkan_ring.py takes a split-half model through eviction and rebase.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from engine.backends.vulkan.tuning import GPU
from engine.conversation import Conversation
from engine.model.config import ModelConfig
from engine.model.layer_kinds import CONV, DELTA, FULL, WINDOW
from engine.state.ring_policy import RingPolicy

from .allocation_checks import assert_steps_allocate_nothing
from .parity import POLICY, TOKENS, run_steps, tiny
from .test_vulkan_prefill import assert_tiled_prefill_then_decode, watch_dispatches

ATOL = 5e-5  # as tests/test_vulkan_parity.py
# Tiny models of the non-llama layouts Vulkan runs: TinySpec fields.
MODELS = {
    "qwen2": {"architecture": "qwen2"},  # split-half RoPE, QKV bias
    "qwen3": {"architecture": "qwen3", "head_dim": 32},  # QK-norm, wide heads
    "llama-wide": {"head_dim": 32},  # heads wider than d_model / n_heads alone
    # Fused q|k|v and gate|up; as many K/V heads as query heads, so the fused q|k rows the
    # upload interleaves end mid-tensor (v's rows stay).
    "phi3": {"architecture": "phi3", "n_kv_heads": 4},
    # Short-convolution layers around one attention layer (QK-norm, split-half RoPE): the
    # ring holds one plane, the carries their own.
    "lfm2": {"architecture": "lfm2", "n_layers": 4, "layer_kinds": (CONV, CONV, FULL, CONV)},
    # Three gated delta-net layers to one attention layer with gated queries, QK-norm and RoPE
    # on 8 of its 32 dims (partial rotary).
    "qwen35": {"architecture": "qwen35", "n_layers": 4, "head_dim": 32, "rope_dim": 8},
    # Five window layers of 8 tokens (their own RoPE base) to one global layer (the 4B's
    # linear scaling), as tests/test_gemma3.py's: the windows slide within TOKENS.
    "gemma3": {"architecture": "gemma3", "n_layers": 6, "head_dim": 32, "rope_theta": 1e6,
               "sliding_window": 8, "rope_linear_factor": 8.0},
}
ARCHS = sorted(MODELS)


@pytest.fixture(scope="module")
def vk_gpu(backend_with):
    """The Vulkan backend with the GPU's shapes, whatever the device."""
    return backend_with(GPU)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("qtype", [QT.F32, QT.Q4_1])
def test_every_step_matches_numpy(tmp_path_factory, vk_backend, arch, qtype) -> None:
    model = tiny(tmp_path_factory, qtype, seed=5, **MODELS[arch])
    want, ref = run_steps(model, None, TOKENS)
    got, conv = run_steps(model, vk_backend, TOKENS)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
    a, b, n = ref.arena.views(), conv.arena.views(), len(TOKENS)
    np.testing.assert_allclose(b.k_cache[:, :n], a.k_cache[:, :n], atol=ATOL, rtol=0)
    np.testing.assert_allclose(b.v_cache[:, :n], a.v_cache[:, :n], atol=ATOL, rtol=0)
    # The features live in shader epilogues: a decode step dispatches what llama's does, but
    # for QK-norm's one an attention layer (its norm spans a head, which spans the product's
    # workgroups) and a gated query's one (sigmoid_gate); post-norms none (the product's last
    # workgroup adds them: MODE_POSTNORM); a CONV or WINDOW layer as many as llama's
    # attention layer; a DELTA layer three more (its three input products, the convolution,
    # the rule).
    cfg = model.config
    attention = 5 + int(cfg.arch.qk_norm) + int(cfg.arch.gated_query)
    per_layer = {FULL: attention, WINDOW: attention, CONV: 5, DELTA: 8}
    assert conv.forward.dispatches_per_token == sum(per_layer[k] for k in cfg.kinds) + 3
    for name in ("conv_state", "delta_conv", "delta_state", "kw_cache", "vw_cache"):
        if name in ref.arena.layout:  # the layer planes outside the ring, as numpy left them
            np.testing.assert_allclose(getattr(b, name), getattr(a, name), atol=ATOL, rtol=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_gpu_shapes_tiled_prefill_then_decode(tmp_path_factory, vk_gpu, arch) -> None:
    """GPU workgroup shapes: tiled products over odd chunks, then decode's split rows."""
    model = tiny(tmp_path_factory, QT.Q8_0, tied=False, seed=9, **MODELS[arch])
    assert_tiled_prefill_then_decode(model, vk_gpu)


def test_llama_pipelines_compile_the_features_out(tiny_model, vk_backend) -> None:
    """A llama model's passes specialize every architecture feature off and record no
    dispatch for one."""
    conv = Conversation(tiny_model, POLICY, backend=vk_backend)
    common = conv.forward.recorder.common
    assert common["ROPE_SPLIT"] == 0 and common["QKV_BIAS"] == 0 and common["QK_NORM"] == 0
    assert (common["WINDOW"], common["GEGLU"], common["EMBED_SCALE"], common["Q_SCALE"]) == (
        0, 0, 1.0, 0.0)
    seen = watch_dispatches(conv)
    conv.ingest(TOKENS[:7])
    conv.forward.decode_one_token(TOKENS[7])
    shaders = {shader for shader, _ in seen}
    assert "matmul" in shaders
    assert not shaders & {"qk_norm", "rmsnorm", "window_attention", "window_store"}


@pytest.mark.parametrize("chunk", [1, 3, 8, 13, 30])
def test_gemma3_prefill_chunks_of_any_size(tmp_path_factory, vk_backend, chunk) -> None:
    """A chunk's queries see the window as it was before the chunk overwrites it: chunks
    shorter than, as long as and longer than the 8-token window (wrapping around it) leave
    numpy's logits and window planes; then decode steps go on from them."""
    model = tiny(tmp_path_factory, QT.F32, seed=3, **MODELS["gemma3"])
    ids = [int(t) for t in np.random.default_rng(3).integers(3, 250, 30)]
    policy = RingPolicy(max_slots=64, recent_window=8, evict_batch=4, prefill_chunk=chunk)
    ref, vk = (Conversation(model, policy, backend=b) for b in (None, vk_backend))
    np.testing.assert_allclose(vk.ingest(ids), ref.ingest(ids), atol=ATOL, rtol=0)
    for t in ids[:3]:
        np.testing.assert_allclose(vk.forward.decode_one_token(t),
                                   ref.forward.decode_one_token(t), atol=ATOL, rtol=0)
    a, b = ref.arena.views(), vk.arena.views()
    for name in ("kw_cache", "vw_cache"):
        np.testing.assert_allclose(getattr(b, name), getattr(a, name), atol=ATOL, rtol=0)


@pytest.mark.parametrize("split_slots", [2, 4])
def test_gemma3_decode_window_in_runs(tmp_path_factory, backend_with, monkeypatch,
                                      split_slots) -> None:
    """Decode cuts a window layer's candidates (the 8 rows and the token's own key) into runs,
    a workgroup each, folded by the last to finish (window_runs): 5 or 3 runs here, some of
    which see no visible key while the window is young. Every step holds to numpy, through
    the window's wrapping around."""
    from engine.backends.vulkan.passes import PassRecorder
    from engine.backends.vulkan.window import window_runs

    seen = []  # every pass's dispatches, the decode pass's (recorded with the forward) too
    record = PassRecorder._dispatch

    def dispatch(rec, shader, spec, groups, **kw):
        seen.append((shader, groups))
        record(rec, shader, spec, groups, **kw)

    monkeypatch.setattr(PassRecorder, "_dispatch", dispatch)
    tuning = replace(GPU, split_slots=split_slots)
    assert window_runs(tuning, 8) == -(-9 // split_slots) and window_runs(GPU, 512) == 9
    model = tiny(tmp_path_factory, QT.F32, seed=4, **MODELS["gemma3"])
    policy = RingPolicy(max_slots=64, recent_window=8, evict_batch=4)
    ref = Conversation(model, policy)
    vk = Conversation(model, policy, backend=backend_with(tuning))
    ids = [int(t) for t in np.random.default_rng(4).integers(3, 250, 14)]
    np.testing.assert_allclose(vk.ingest(ids[:2]), ref.ingest(ids[:2]), atol=ATOL, rtol=0)
    for t in ids[2:]:  # the window fills, then slides
        np.testing.assert_allclose(vk.forward.decode_one_token(t),
                                   ref.forward.decode_one_token(t), atol=ATOL, rtol=0)
    runs = {groups for shader, groups in seen if shader == "window_attention"}
    assert (model.config.n_kv_heads, window_runs(tuning, 8)) in runs
    a, b = ref.arena.views(), vk.arena.views()
    for name in ("kw_cache", "vw_cache"):
        np.testing.assert_allclose(getattr(b, name), getattr(a, name), atol=ATOL, rtol=0)


def test_gemma3_query_scale_of_its_own(tmp_path_factory, vk_backend, monkeypatch) -> None:
    """Gemma 3 27B scales its queries by 1/sqrt(d_model / n_heads), not 1/sqrt(head_dim):
    a scale the shaders take as Q_SCALE, in the window and the global layers alike."""
    model = tiny(tmp_path_factory, QT.F32, seed=4, **MODELS["gemma3"])
    monkeypatch.setattr(ModelConfig, "q_scale", property(lambda cfg: 0.3))
    want, _ = run_steps(model, None, TOKENS)
    got, conv = run_steps(model, vk_backend, TOKENS)
    assert conv.forward.recorder.common["Q_SCALE"] == pytest.approx(0.3)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)


def test_gemma3_window_planes_past_the_storage_limit_are_refused(tmp_path_factory, vk_backend,
                                                                 monkeypatch) -> None:
    """The window planes are bound whole (the ring's K/V planes go in groups of layers): a
    device whose maxStorageBufferRange they pass says so in one line, naming the CPU way."""
    model = tiny(tmp_path_factory, QT.F32, seed=4, **MODELS["gemma3"])
    cfg, ctx = model.config, vk_backend.ctx
    planes = len(cfg.layers_of(WINDOW)) * cfg.window * cfg.kv_dim * 4  # f32 kw_cache bytes
    monkeypatch.setattr(ctx, "limits", replace(ctx.limits, max_storage_range=planes - 4))
    with pytest.raises(ValueError, match="window layers' kw_cache planes .* --backend ggml"):
        Conversation(model, POLICY, backend=vk_backend)


def test_gemma3_decode_allocates_no_numpy_buffers(tmp_path_factory, vk_backend) -> None:
    """A window model's decode step reads the ring's clock and writes two more parameter
    words (the window row and fill): still no numpy buffer a step."""
    model = tiny(tmp_path_factory, QT.F32, seed=4, **MODELS["gemma3"])
    assert_steps_allocate_nothing(Conversation(model, POLICY, backend=vk_backend), TOKENS)


def test_delta_rule_heads_the_shader_cannot_split_are_refused_by_name(tmp_path_factory,
                                                                      vk_backend) -> None:
    from dataclasses import replace

    from engine.backends.base import model_problem
    from engine.backends.vulkan.loader import UnsupportedModelForVulkanError
    from engine.backends.vulkan.recurrent import delta_lanes, delta_width_problem

    assert delta_lanes(128, 1024) == 4  # Qwen3.5's heads: a quarter row an invocation
    assert delta_lanes(128, 256) == 2  # a smaller workgroup limit: half rows
    assert delta_lanes(130, 1024) == 0
    assert "multiple of 4" in delta_width_problem(130, 1024)
    model = tiny(tmp_path_factory, QT.F32, **MODELS["qwen35"])
    assert model_problem(vk_backend, model.config) is None
    odd = replace(model.config, delta_head_dim=130)
    assert "not 130" in model_problem(vk_backend, odd)
    # Asked for by name, the refusal names the backend to use instead (before any upload).
    with pytest.raises(UnsupportedModelForVulkanError, match="not 130; use --backend ggml"):
        vk_backend.make_forward(replace(model, config=odd), None)
