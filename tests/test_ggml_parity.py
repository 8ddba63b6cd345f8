"""The ggml backend against the numpy reference on tiny random-weight models.

ggml keeps keys in f16 (and rounds queries to f16 for the product), so even with F32 weights
logits, keys, values and attention mass agree to f16 rounding rather than f32: REL_F16 of the
largest magnitude. With quantized weights ggml also quantizes the activations (to Q8 blocks,
as llama.cpp does) before each product, so agreement is looser still (REL_QUANT).
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from engine.allocs import measure_allocations
from engine.conversation import Conversation
from engine.snapshot.chain import restore
from engine.snapshot.snapshotter import Snapshotter
from engine.state.kv_format import stored_by_dimension
from engine.state.ring_policy import RingPolicy
from engine.state.sampler import SamplingSettings

from .parity import POLICY, TOKENS, run_steps, tiny

ATOL_F32 = 5e-5
# f16 keys and queries carry 2^-11 (0.05%) relative rounding each; measured on the tiny models
# the logits move by up to 1e-4 of their largest magnitude.
REL_F16 = 1e-3
# Quantized weights: ggml rounds each product's input to 8-bit blocks (F16 weights: to f16),
# about 0.4% per element. Measured over the tiny models' two layers the logits move by up to
# 1.5% of their largest magnitude; 3% leaves room for other seeds without hiding a real bug
# (a wrong head mapping or RoPE mode moves them by tens of percent).
REL_QUANT = 3e-2

pytest.importorskip("ggml", reason="ggml-python is not installed (needs a C compiler)")


@pytest.fixture(scope="module")
def ggml_backend():
    from engine.backends.ggml.backend import GgmlBackend

    return GgmlBackend()


def close(got: np.ndarray, want: np.ndarray, rel: float) -> None:
    """Equal within `rel` of want's largest magnitude (ATOL_F32 absolute at least)."""
    atol = max(ATOL_F32, rel * float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, atol=atol, rtol=0)


@pytest.mark.parametrize(("qtype", "rel"), [
    (QT.F32, REL_F16), (QT.F16, REL_QUANT), (QT.Q8_0, REL_QUANT), (QT.Q4_0, REL_QUANT),
    (QT.Q4_1, REL_QUANT), (QT.Q5_0, REL_QUANT), (QT.Q5_1, REL_QUANT)])
def test_every_step_matches_numpy(tmp_path_factory, ggml_backend, qtype, rel) -> None:
    model = tiny(tmp_path_factory, qtype)
    want, ref = run_steps(model, None, TOKENS)
    got, conv = run_steps(model, ggml_backend, TOKENS)
    assert got.dtype == np.float32
    close(got, want, rel)
    assert (got.argmax(axis=1) == want.argmax(axis=1)).mean() >= 0.9
    a, b, n = ref.arena.views(), conv.arena.views(), len(TOKENS)
    close(b.k_cache[:, :n], a.k_cache[:, :n], rel)
    close(b.v_cache[:, :n], a.v_cache[:, :n], rel)
    close(b.slot_salience[:n], a.slot_salience[:n], rel)
    assert list(b.slot_pos[:n]) == list(a.slot_pos[:n])


@pytest.mark.parametrize("qtype", [QT.Q4_K, QT.Q5_K, QT.Q6_K])
def test_k_quant_products_match_gguf_dequantized(qtype) -> None:
    """ggml's K-quant kernels read the blocks as gguf-py dequantizes them. Compared one product
    at a time: random K-quant tiny models are chaotic (large random scales), so whole-model
    logits would amplify the activation rounding rather than test the weights."""
    import ctypes

    import gguf

    from engine.backends.ggml.lib import array_at, data_address, ggml

    from .tiny_model import random_k_quant

    g = ggml()
    rng = np.random.default_rng(0)
    rows, cols = 16, 512
    blocks = random_k_quant((rows, cols), qtype, rng)
    want = gguf.quants.dequantize(blocks, qtype).reshape(rows, cols) @ (
        x := rng.standard_normal(cols).astype(np.float32))
    ctx = g.ggml_init(g.ggml_init_params(mem_size=1 << 22, no_alloc=False))
    try:
        w = g.ggml_new_tensor_2d(ctx, int(qtype), cols, rows)
        ctypes.memmove(data_address(w), blocks.ctypes.data, blocks.nbytes)
        xt = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, cols)
        ctypes.memmove(data_address(xt), x.ctypes.data, x.nbytes)
        y = g.ggml_mul_mat(ctx, w, xt)
        graph = g.ggml_new_graph(ctx)
        g.ggml_build_forward_expand(graph, y)
        g.ggml_graph_compute_with_ctx(ctx, graph, 1)
        got = array_at(data_address(y), np.float32, rows).copy()
    finally:
        g.ggml_free(ctx)
    close(got, want, REL_QUANT)


def test_chunked_prefill_and_hidden_rows_match_numpy(tmp_path_factory, ggml_backend) -> None:
    model = tiny(tmp_path_factory, QT.F32, tied=False, seed=5)
    rows = {}
    for name, backend in (("numpy", None), ("ggml", ggml_backend)):
        conv = Conversation(model, POLICY, backend=backend)
        hidden: list[np.ndarray] = []
        last = conv.ingest(TOKENS, on_hidden=lambda h, out=hidden: out.append(h.copy()))
        rows[name] = (np.concatenate(hidden), last.copy(), conv.arena.views().mass.copy())
    assert rows["ggml"][0].shape == (len(TOKENS), model.config.d_model)
    for got, want in zip(rows["ggml"], rows["numpy"]):
        close(got, want, REL_F16)


@pytest.mark.parametrize(("qtype", "rel"), [(QT.F32, REL_F16), (QT.Q4_0, REL_QUANT)])
def test_long_chunks_match_numpy(tmp_path_factory, ggml_backend, qtype, rel) -> None:
    """Chunks of DEQUANTIZE_FROM tokens or more take the expand-to-f32 GEMM path (for an
    all-F32 model there is nothing to expand, and the graph must still build)."""
    from engine.backends.ggml.forward import DEQUANTIZE_FROM

    model = tiny(tmp_path_factory, qtype, context_length=512, seed=7)
    policy = RingPolicy(max_slots=256, recent_window=16, evict_batch=16,
                        prefill_chunk=2 * DEQUANTIZE_FROM)
    ids = [int(t) for t in np.random.default_rng(2).integers(3, 250, 5 * DEQUANTIZE_FROM)]
    out = {}
    for name, backend in (("numpy", None), ("ggml", ggml_backend)):
        conv = Conversation(model, policy, backend=backend)
        out[name] = (conv.ingest(ids).copy(), conv.arena.views().slot_salience[: len(ids)].copy())
    for got, want in zip(out["ggml"], out["numpy"]):
        close(got, want, rel)


def test_eviction_and_rebase_match_numpy(tmp_path_factory, ggml_backend) -> None:
    """A ring of 24 slots over a 40-position model: many evictions and rebases, every step
    compared; the ring's bookkeeping is shared code, the K/V it moves is ggml's."""
    model = tiny(tmp_path_factory, QT.F32, context_length=40, seed=3)
    policy = RingPolicy(max_slots=24, recent_window=4, evict_batch=3, prefill_chunk=5)
    ids = [int(t) for t in np.random.default_rng(1).integers(3, 250, 90)]
    want, ref = run_steps(model, None, ids, policy)
    got, conv = run_steps(model, ggml_backend, ids, policy)
    assert conv.ring.evicted > 20 and conv.ring.rebases >= 2
    assert conv.ring.evicted == ref.ring.evicted and conv.ring.rebases == ref.ring.rebases
    close(got, want, REL_F16)
    a, b = ref.arena.views(), conv.arena.views()
    assert list(b.slot_clock[: conv.ring.n_active]) == list(a.slot_clock[: ref.ring.n_active])


def test_greedy_generation_matches_numpy(tiny_model, ggml_backend) -> None:
    out = []
    for backend in (None, ggml_backend):
        conv = Conversation(tiny_model, POLICY, backend=backend)
        conv.ingest(TOKENS[:9])
        out.append(conv.generate(SamplingSettings(), 24, frozenset()).ids)
    assert out[0] == out[1]


def test_decode_allocates_no_numpy_buffers(tiny_model, ggml_backend) -> None:
    conv = Conversation(tiny_model, POLICY, backend=ggml_backend)
    conv.ingest(TOKENS[:4])
    tokens = iter(TOKENS * 2)
    conv.forward.decode_one_token(next(tokens))  # builds the bucket's graph once
    report = measure_allocations(lambda: conv.forward.decode_one_token(next(tokens)), 8)
    assert report.numpy_new_buffers == 0
    assert report.peak_transient_bytes < 16_384


def test_weights_are_the_gguf_mapping_not_a_copy(tiny_model, ggml_backend) -> None:
    conv = Conversation(tiny_model, POLICY, backend=ggml_backend)
    w = conv.forward.w
    assert tiny_model.weights is not None  # the fixture's f32 image exists, but is unused
    start = w._mapping_address
    embd = w.token_embd.contents.data
    assert start <= embd < start + w.path.stat().st_size
    assert embd - start == tiny_model.tensors["token_embd.weight"].offset
    again = Conversation(tiny_model, POLICY, backend=ggml_backend)
    assert again.forward.w is w  # one mapping per model, shared by conversations


@pytest.mark.parametrize("direction", ["numpy->ggml", "ggml->numpy"])
def test_snapshot_crosses_backends(tiny_model, ggml_backend, tmp_path, direction) -> None:
    from engine.backends.numpy.backend import NumpyBackend

    source_backend, target_backend = (
        (NumpyBackend(), ggml_backend) if direction == "numpy->ggml" else
        (ggml_backend, NumpyBackend()))
    source = Conversation(tiny_model, POLICY, backend=source_backend)
    source.ingest(TOKENS[:12])
    path = Snapshotter(source, tmp_path / "x.snapshot.bin").save("").path
    target = Conversation(tiny_model, POLICY, backend=target_backend)
    restore(target, path)
    n = source.ring.n_active
    a, b = source.arena.views(), target.arena.views()
    for plane in ("k_cache", "v_cache"):
        pa, pb = getattr(a, plane), getattr(b, plane)
        assert {pa.dtype, pb.dtype} == {np.dtype(np.float16), np.dtype(np.float32)}
        # Converted on restore: f32 rounds to nearest f16, f16 widens exactly; ggml's values,
        # stored by dimension, are transposed by the same copy.
        np.testing.assert_array_equal(pa[:, :n].astype(pb.dtype), pb[:, :n])
    assert {stored_by_dimension(a.v_cache), stored_by_dimension(b.v_cache)} == {True, False}
    np.testing.assert_array_equal(a.slot_salience[:n], b.slot_salience[:n])
    la = source.forward.decode_one_token(42)
    lb = target.forward.decode_one_token(42)
    close(lb, la, REL_F16)


def test_weights_are_shared_then_let_go_with_the_last_conversation(tiny_model,
                                                                   ggml_backend) -> None:
    """An engine whose sessions moved to another model must not keep the old weights."""
    import gc
    import weakref

    first = Conversation(tiny_model, POLICY, backend=ggml_backend)
    second = Conversation(tiny_model, POLICY, backend=ggml_backend)
    assert first.forward.w is second.forward.w
    weights = weakref.ref(first.forward.w)
    del first, second
    gc.collect()
    assert weights() is None
