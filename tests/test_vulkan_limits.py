"""Models past the device's binding limits load and run (issue 34, item 2).

An H200 takes at most 2^27 texels in one texel view (maxTexelBufferElements), which an 8B
model's weights pass; every buffer bound as one view must stay under that and under
maxStorageBufferRange. Here the limits are lowered on lavapipe so that a tiny model's weights
split into chunks, its embedding and output matrices into pieces of rows, and its K/V planes
into groups of layers; the split run must give the unsplit run's logits exactly (the same
shaders on the same numbers) and numpy's to the parity tests' tolerance.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT

from engine.backends.vulkan.chunks import Planner
from engine.backends.vulkan.loader import UnsupportedModelForVulkanError
from engine.backends.vulkan.tuning import CPU, GPU
from engine.conversation import Conversation
from engine.model.model import TensorInfo
from engine.model.rope import rotate_pairs

from .parity import POLICY, TOKENS, run_steps, tiny

ATOL = 5e-5  # test_vulkan_parity.py's
SHAPE = {"n_layers": 4, "context_length": 64}  # 4 layers: K/V groups


def lower_limits(monkeypatch, backend, texels: int, storage: int | None = None) -> None:
    ctx = backend.ctx
    monkeypatch.setattr(ctx, "limits", replace(
        ctx.limits, max_texel_elements=texels,
        max_storage_range=storage or ctx.limits.max_storage_range))


# (tuning, weight type, tied, texel limit, storage limit). Q4_0 under 520 texels: every layer
# matrix fits (gate|up is 512 blocks of one texel) but the 534-texel embedding does not, and
# one layer's K plane (64 slots x 32 floats = 512 RGBA32F texels) fits where two do not.
# F16 (4 texels a block) under 2100 texels: gate|up (2048) fits, the embedding (2136) and
# output do not; a storage limit of 12 KiB binds one layer's 8 KiB K plane at a time (the
# GPU shapes' split-attention scratch would not fit that, so the CPU shapes take it).
CASES = [
    pytest.param(GPU, QT.Q4_0, True, 520, None, id="gpu-q4_0-tied-texels"),
    # The same chunks bound again as storage buffers (bindings 25-26) for the decode products.
    pytest.param(replace(GPU, ssbo_inputs=True, ssbo_weights=True), QT.Q4_0, True, 520, None,
                 id="gpu-storage-q4_0-tied-texels"),
    pytest.param(CPU, QT.F16, False, 2100, 12288, id="cpu-f16-untied-storage"),
]


@pytest.mark.parametrize(("tuning", "qtype", "tied", "texels", "storage"), CASES)
def test_split_model_matches_unsplit_and_numpy(tmp_path_factory, monkeypatch, backend_with,
                                               tuning, qtype, tied, texels, storage) -> None:
    model = tiny(tmp_path_factory, qtype, tied=tied, seed=3, **SHAPE)
    want, _ = run_steps(model, None, TOKENS)
    whole, conv = run_steps(model, backend_with(tuning), TOKENS)
    assert len(conv.forward.res.sets._sets) == 1  # everything fits: one set, bound once
    cfg = model.config
    assert conv.forward.dispatches_per_token == 5 * cfg.n_layers + 3

    backend = backend_with(tuning)  # its own weights, uploaded under the lowered limits
    lower_limits(monkeypatch, backend, texels, storage)
    split, conv = run_steps(model, backend, TOKENS)
    w, res = conv.forward.recorder.w, conv.forward.res
    assert len(w.wq) > 2 and len(w.embed) > 1 and len(w.output) > 1
    assert len(res.kv_groups) == cfg.n_layers  # one layer a group
    assert len(res.sets._sets) > 2  # rebound where a dispatch needs another chunk or group
    assert all(b.size <= 16 * texels for b in w.wq)
    assert all(b.size <= 4 * texels for b in w.ws)
    pieces = len(w.embed) - 1 + len(w.output) - 1  # the only dispatches a split adds
    assert conv.forward.dispatches_per_token == 5 * cfg.n_layers + 3 + pieces
    np.testing.assert_array_equal(split, whole)
    np.testing.assert_allclose(split, want, atol=ATOL, rtol=0)


def test_split_eviction_and_key_rotation_match_numpy(tmp_path_factory, monkeypatch,
                                                     backend_with) -> None:
    """A ring that evicts, prefilled in chunks, then the device's key rotation (one
    rope_rebase dispatch per group of K planes), under the lowered limits."""
    model = tiny(tmp_path_factory, QT.Q4_0, seed=4, **SHAPE)
    ids = TOKENS * 4  # 80 tokens in 64 slots
    backend = backend_with(CPU)
    lower_limits(monkeypatch, backend, 520)  # as the first case: one layer's K plane a group
    rows = {}
    for name, be in (("numpy", None), ("vulkan", backend)):
        conv = Conversation(model, POLICY, backend=be)
        out = [conv.ingest(ids[:20]).copy()]
        out += [conv.forward.decode_one_token(t).copy() for t in ids[20:]]
        rows[name] = (np.stack(out), conv)
    conv = rows["vulkan"][1]
    assert conv.ring.evicted and len(conv.forward.res.kv_groups) == model.config.n_layers
    np.testing.assert_allclose(rows["vulkan"][0], rows["numpy"][0], atol=ATOL, rtol=0)
    a, b = rows["numpy"][1].arena.views(), conv.arena.views()
    np.testing.assert_allclose(b.k_cache, a.k_cache, atol=ATOL, rtol=0)

    cfg, n = model.config, 20
    angle = np.random.default_rng(11).uniform(-50, 50, (n, 1)) * model.rope.inv_freq
    b.rebase_cos[:n, 0], b.rebase_sin[:n, 0] = np.cos(angle), np.sin(angle)
    want = b.k_cache[:, :n].copy()
    lo = np.empty((n, cfg.n_kv_heads, cfg.head_dim // 2), np.float32)
    hi = np.empty_like(lo)
    for layer in want:
        rotate_pairs(layer.reshape(n, cfg.n_kv_heads, cfg.head_dim), b.rebase_cos[:n],
                     b.rebase_sin[:n], lo, hi)
    conv.forward.rotate_keys(n)
    np.testing.assert_allclose(b.k_cache[:, :n], want, atol=1e-6, rtol=0)


def test_a_layer_matrix_past_the_limit_is_refused_in_one_line(tmp_path_factory, monkeypatch,
                                                              backend_with) -> None:
    model = tiny(tmp_path_factory, QT.Q4_0, seed=3, **SHAPE)
    backend = backend_with(CPU)
    lower_limits(monkeypatch, backend, 300)  # gate|up is 512 texels
    with pytest.raises(UnsupportedModelForVulkanError) as err:
        Conversation(model, POLICY, backend=backend)
    msg = str(err.value)
    assert "\n" not in msg and "blk.0.ffn_gate.weight" in msg
    assert "maxTexelBufferElements of 300" in msg


def test_a_kv_plane_past_the_limit_is_refused(tmp_path_factory, monkeypatch,
                                              backend_with) -> None:
    model = tiny(tmp_path_factory, QT.Q4_0, seed=3, **SHAPE)
    backend = backend_with(CPU)
    lower_limits(monkeypatch, backend, 1 << 27, 4096)  # one layer's K plane is 8 KiB
    with pytest.raises(ValueError, match="smaller ring"):
        Conversation(model, POLICY, backend=backend)


def test_a_long_context_costs_no_device_memory(tmp_path_factory, monkeypatch,
                                               backend_with) -> None:
    """RoPE's cos/sin rows come with each pass rather than as tables of the whole context:
    a model of Qwen3.5's 262,144 positions (whole tables: 268 MB at its head size) runs
    under a 64 KiB storage limit and matches numpy."""
    model = tiny(tmp_path_factory, QT.Q4_0, seed=3, n_layers=4, context_length=1 << 18)
    want, _ = run_steps(model, None, TOKENS)
    backend = backend_with(CPU)
    lower_limits(monkeypatch, backend, 1 << 27, 64 << 10)
    got, conv = run_steps(model, backend, TOKENS)
    assert conv.forward.recorder.w.vec.size < 64 << 10
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)


def _info(rows: int, cols: int, qtype: int = 2) -> TensorInfo:
    elements, nbytes = GGML_QUANT_SIZES[QT(qtype)]
    return TensorInfo(qtype, (cols, rows), 0, rows * cols // elements * nbytes)


def test_an_8b_model_packs_under_the_h200s_texel_limit() -> None:
    """Issue 34's 8B shape (32 layers, d 4096, 8 K/V heads, FFN 14336, Q4_0, a 128k
    vocabulary) against maxTexelBufferElements 2^27: 230M texels before, now in chunks."""
    d, kv, ffn, vocab, cap = 4096, 1024, 14336, 128256, 1 << 27
    tensors = {"token_embd.weight": _info(vocab, d), "output.weight": _info(vocab, d)}
    for i in range(32):
        b = f"blk.{i}."
        tensors |= {b + "attn_q.weight": _info(d, d), b + "attn_k.weight": _info(kv, d),
                    b + "attn_v.weight": _info(kv, d), b + "attn_output.weight": _info(d, d),
                    b + "ffn_gate.weight": _info(ffn, d), b + "ffn_up.weight": _info(ffn, d),
                    b + "ffn_down.weight": _info(d, ffn)}
    p = Planner(tensors, cap)
    embed = p.matrix("token_embd.weight", pieces=True)
    for i in range(32):
        b = f"blk.{i}."
        p.matrix(b + "attn_q.weight", b + "attn_k.weight", b + "attn_v.weight")
        p.matrix(b + "attn_output.weight")
        p.matrix(b + "ffn_gate.weight", b + "ffn_up.weight")
        p.matrix(b + "ffn_down.weight")
    output = p.matrix("output.weight", pieces=True)
    assert len(embed) == len(output) == 1
    assert len(p.chunks) == 2 and all(t <= cap and b <= cap for t, b in p.chunks)
    assert sum(t for t, _ in p.chunks) > cap  # the 230M texels that were refused

    # A matrix that passes a chunk alone (Qwen's 152k vocabulary in F32: 156M texels) is cut
    # into pieces of whole rows.
    vocab = 152064
    p = Planner({"token_embd.weight": _info(vocab, d, 0)}, cap)
    pieces = p.matrix("token_embd.weight", pieces=True)
    assert len(pieces) == 2 and sum(m.rows for m in pieces) == vocab
    assert [m.row0 for m in pieces] == [0, pieces[0].rows]
