"""The Vulkan backend against the numpy backend on tiny random-weight models (lavapipe in CI).

Logits, keys, values and attention mass must agree to float tolerance at every step, for every
weight encoding the shaders read; the arena must keep numpy's exact K/V layout.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from engine.backends.vulkan import UnsupportedTensorTypeForVulkanError
from engine.backends.vulkan.loader import UnsupportedModelForVulkanError
from engine.conversation import Conversation

from .allocation_checks import assert_steps_allocate_nothing
from .parity import POLICY, TOKENS, run_steps, tiny

ATOL = 5e-5


@pytest.mark.parametrize("qtype", [QT.F32, QT.F16, QT.Q8_0, QT.Q4_0, QT.Q4_1])
def test_every_step_matches_numpy(tmp_path_factory, vk_backend, qtype) -> None:
    model = tiny(tmp_path_factory, qtype)
    want, ref = run_steps(model, None, TOKENS)
    got, conv = run_steps(model, vk_backend, TOKENS)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
    a, b, n = ref.arena.views(), conv.arena.views(), len(TOKENS)
    np.testing.assert_allclose(b.k_cache[:, :n], a.k_cache[:, :n], atol=ATOL, rtol=0)
    np.testing.assert_allclose(b.v_cache[:, :n], a.v_cache[:, :n], atol=ATOL, rtol=0)
    np.testing.assert_allclose(b.slot_salience[:n], a.slot_salience[:n], atol=1e-5, rtol=0)
    assert list(b.slot_pos[:n]) == list(a.slot_pos[:n])


def test_chunked_prefill_and_hidden_rows_match_numpy(tmp_path_factory, vk_backend) -> None:
    model = tiny(tmp_path_factory, QT.Q4_1, tied=False, seed=5)
    rows = {}
    for name, backend in (("numpy", None), ("vulkan", vk_backend)):
        conv = Conversation(model, POLICY, backend=backend)
        hidden: list[np.ndarray] = []
        last = conv.ingest(TOKENS, on_hidden=lambda h, out=hidden: out.append(h.copy()))
        rows[name] = (np.concatenate(hidden), last.copy(), conv.arena.views().mass.copy())
    assert rows["vulkan"][0].shape == (len(TOKENS), model.config.d_model)
    np.testing.assert_allclose(rows["vulkan"][0], rows["numpy"][0], atol=ATOL, rtol=0)
    np.testing.assert_allclose(rows["vulkan"][1], rows["numpy"][1], atol=ATOL, rtol=0)


def test_kv_layout_is_numpys(tiny_model, vk_backend) -> None:
    conv = Conversation(tiny_model, POLICY, backend=vk_backend)
    ref = Conversation(tiny_model, POLICY)
    for c in (conv, ref):
        c.ingest(TOKENS[:7])
    a, b = ref.arena.views(), conv.arena.views()
    cfg = tiny_model.config
    for name in ("k_cache", "v_cache"):
        va, vb = getattr(a, name), getattr(b, name)
        assert vb.dtype == va.dtype == np.float32
        assert vb.shape == va.shape == (cfg.n_layers, POLICY.max_slots, cfg.kv_dim)
        assert vb.strides == va.strides
        assert conv.layout[name].offset == ref.layout[name].offset
        np.testing.assert_allclose(vb[:, :7], va[:, :7], atol=ATOL, rtol=0)


def test_arena_is_mapped_device_memory(tiny_model, vk_backend) -> None:
    conv = Conversation(tiny_model, POLICY, backend=vk_backend)
    desc = vk_backend.describe()
    assert desc["arena_memory"].startswith("mapped")
    # lavapipe and UMA read the mapping directly; a GPU's uncached BAR window stages copies.
    assert desc["snapshot_path"] == conv.forward.snapshot_path
    assert desc["snapshot_path"] == ("staging" if desc["device"]["type"].endswith("gpu")
                                     and "HOST_CACHED" not in desc["arena_memory"]
                                     else "mapped")
    buf = conv.forward.res.arena_buf
    assert buf.address <= conv.arena.base_address
    assert conv.arena.base_address + conv.arena.nbytes <= buf.address + buf.size
    assert not conv.arena.views().k_cache.any()  # zeroed, like np.zeros


def test_decode_allocates_no_numpy_buffers(tiny_model, vk_backend) -> None:
    assert_steps_allocate_nothing(Conversation(tiny_model, POLICY, backend=vk_backend), TOKENS)


def test_greedy_generation_matches_numpy(tiny_model, vk_backend) -> None:
    from engine.state.sampler import SamplingSettings

    out = []
    for backend in (None, vk_backend):
        conv = Conversation(tiny_model, POLICY, backend=backend)
        conv.ingest(TOKENS[:9])
        out.append(conv.generate(SamplingSettings(), 24, frozenset()).ids)
    assert out[0] == out[1]


@pytest.mark.parametrize("split,storage", [(2, False), (8, False), (32, False),
                                           (8, True), (32, True)])
def test_gpu_products_match_numpy(tmp_path_factory, backend_with, split, storage) -> None:
    """matmul.comp under the GPU shapes: rows of 3 and 5 blocks, so that some lanes own two or
    three blocks and some none (2 and 8 lanes a row group), summed by shuffles where a row group
    fits lavapipe's 8-lane subgroups and through shared memory where not (32, the default);
    inputs, norm weights and weight blocks read as texels and as storage buffers."""
    from engine.backends.vulkan.tuning import GPU

    model = tiny(tmp_path_factory, QT.Q4_1, d_model=96, n_heads=3, n_kv_heads=1, ffn_dim=160)
    want, _ = run_steps(model, None, TOKENS)
    got, _ = run_steps(model, backend_with(replace(GPU, split=split, ssbo_inputs=storage,
                                                       ssbo_weights=storage)), TOKENS)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)


def test_unreadable_tensor_type_is_a_clear_error(tmp_path_factory, vk_backend) -> None:
    """Refused by the one support function (backend_problem) before any upload, naming the
    types the shaders read; a config that does not record its types still meets the
    upload's own check."""
    model = tiny(tmp_path_factory, QT.BF16)
    with pytest.raises(UnsupportedModelForVulkanError) as exc:
        Conversation(model, POLICY, backend=vk_backend)
    assert str(exc.value) == ("the Vulkan backend does not read BF16 weights (it reads F32, "
                              "F16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q3_K, Q4_K, Q5_K, Q6_K); "
                              "use --backend ggml")
    unrecorded = replace(model, config=replace(model.config, tensor_types=()))
    with pytest.raises(UnsupportedTensorTypeForVulkanError, match="BF16"):
        Conversation(unrecorded, POLICY, backend=vk_backend)


@pytest.mark.parametrize("groups", [1, 3, 64])
def test_device_argmax_is_nps(tiny_model, vk_backend, backend_with, groups) -> None:
    """After prefill (argmax.comp) and every decode step (the mass tail), over 1 to 64
    ranges of the vocabulary (64 leave the last ranges of this 267-token vocabulary empty)."""
    backend = backend_with(replace(vk_backend.tuning, argmax_groups=groups))
    conv = Conversation(tiny_model, POLICY, backend=backend)
    logits = conv.ingest(TOKENS[:5])
    for t in TOKENS[5:12]:
        assert conv.forward.greedy_token == int(np.argmax(logits))
        logits = conv.forward.decode_one_token(t)
    assert conv.forward.greedy_token == int(np.argmax(logits))


def test_snapshot_regions_and_logits_read_back_equal(tiny_model, vk_backend, staging) -> None:
    """Both snapshot paths: the mapped views, and the device copy into host-cached memory
    that a GPU whose arena sits in its uncached BAR window takes (forced here)."""
    conv = Conversation(tiny_model, POLICY, backend=vk_backend)
    logits = conv.ingest(TOKENS[:9])
    logits = conv.forward.decode_one_token(TOKENS[9])
    v = conv.arena.views()
    staged = staging or not conv.forward.res.arena_buf.memory_flags & 0x8  # not HOST_CACHED
    assert conv.forward.snapshot_path == ("staging" if staged else "mapped")
    assert (logits is v.logits) != staged
    np.testing.assert_array_equal(logits, v.logits)
    names = ["k_cache", "v_cache", "slot_salience", "slot_pos"]
    got = conv.forward.read_regions(names)
    for name in names:
        np.testing.assert_array_equal(got[name], getattr(v, name))
    # A chain segment's read: only slots 3..10 of each K/V layer, the rest whole.
    rows = conv.forward.read_regions(names, rows=(3, 10))
    for name in names:
        want = getattr(v, name)[:, 3:10] if name.endswith("_cache") else getattr(v, name)
        np.testing.assert_array_equal(rows[name], want)
    assert conv.forward.read_regions(["k_cache"], rows=(4, 4))["k_cache"].shape[1] == 0
