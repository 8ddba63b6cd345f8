"""The architecture features the Vulkan backend implements (split-half RoPE, QKV bias, QK-norm,
wide heads, fused QKV and gate/up, LFM2's short-convolution layers), held to the numpy backend
on tiny random-weight models of each family: every decode step, chunked prefill under the CPU
shapes (matmul.comp) and tiled prefill under the GPU shapes (matmul_tiled), the K/V planes (and
conv carries) in numpy's layout, and no dispatch beyond llama's but QK-norm's one a layer.

tests/test_arch_reference.py holds the same families to transformers on the committed
fixtures; tests/test_vulkan_ring.py takes a split-half model through eviction and rebase.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from engine.backends.vulkan.tuning import GPU
from engine.conversation import Conversation
from engine.model.layer_kinds import CONV, DELTA, FULL

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
    # workgroups) and a gated query's one (sigmoid_gate); a CONV layer as many as llama's
    # layer; a DELTA layer three more (its three input products, the convolution, the rule).
    cfg = model.config
    attention = 5 + int(cfg.arch.qk_norm) + int(cfg.arch.gated_query)
    per_layer = {FULL: attention, CONV: 5, DELTA: 8}
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
    seen = watch_dispatches(conv)
    conv.ingest(TOKENS[:7])
    conv.forward.decode_one_token(TOKENS[7])
    assert "matmul" in {shader for shader, _ in seen}
    assert "qk_norm" not in {shader for shader, _ in seen}
