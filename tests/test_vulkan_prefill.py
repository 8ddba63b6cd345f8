"""Tiled prefill on the Vulkan backend (matmul_tiled / matmul_coopmat, attention_prefill,
mass.comp over runs of slots) against the numpy backend, on tiny random-weight models.

The GPU workgroup shapes are forced, so lavapipe runs the shared-memory tiles here; the
cooperative-matrix products run where the device has them (an NVIDIA GPU) and are skipped
elsewhere. Chunk lengths are odd and not multiples of the tiles, prompts span several chunks,
and logits, keys, values, attention mass and salience must agree with numpy's to the
tolerances of tests/test_vulkan_parity.py.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from engine.backends.vulkan.prefill import product_tile, tiled
from engine.backends.vulkan.tuning import CPU, GPU, prefill_runs
from engine.conversation import Conversation
from engine.state.ring_policy import RingPolicy
from engine.state.sampler import SamplingSettings

from .parity import tiny

ATOL = 5e-5  # as tests/test_vulkan_parity.py
# 64-token chunks: buckets of 64 (64-token tiles), and tails of 32 and 16 token tiles.
POLICY = RingPolicy(max_slots=256, recent_window=8, evict_batch=4, prefill_chunk=64)


@pytest.fixture(scope="module")
def vk_gpu(backend_with):
    """The Vulkan backend with the GPU's shapes, whatever the device."""
    return backend_with(GPU)


def prompt(n: int, seed: int, vocab: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(3, vocab, n)]


def watch_dispatches(conv: Conversation) -> list[tuple[str, tuple]]:
    """(shader, workgroups) of every pass recorded from now on (passes are recorded on first
    use)."""
    rec, seen = conv.forward.recorder, []
    record = rec._dispatch

    def dispatch(shader, spec, groups, **kw):
        seen.append((shader, groups))
        record(shader, spec, groups, **kw)

    rec._dispatch = dispatch
    return seen


def assert_same_state(vk: Conversation, ref: Conversation, n: int) -> None:
    a, b = ref.arena.views(), vk.arena.views()
    np.testing.assert_allclose(b.logits, a.logits, atol=ATOL, rtol=0)
    np.testing.assert_allclose(b.k_cache[:, :n], a.k_cache[:, :n], atol=ATOL, rtol=0)
    np.testing.assert_allclose(b.v_cache[:, :n], a.v_cache[:, :n], atol=ATOL, rtol=0)
    np.testing.assert_allclose(b.mass[:n], a.mass[:n], atol=1e-5, rtol=0)
    np.testing.assert_allclose(b.slot_salience[:n], a.slot_salience[:n], atol=1e-5, rtol=0)
    assert list(b.slot_pos[:n]) == list(a.slot_pos[:n])
    assert b.ring_counters.tolist() == a.ring_counters.tolist()


def run_pair(model, backend, chunks: list[list[int]], policy: RingPolicy = POLICY,
             first_anchors: bool = False, grids: list | None = None,
             ) -> tuple[Conversation, Conversation, list[str]]:
    """Ingest `chunks` (one ingest call each) on numpy and on `backend`; returns the shaders
    recorded (and their workgroups in `grids`, if given)."""
    ref = Conversation(model, policy)
    vk = Conversation(model, policy, backend=backend)
    seen = watch_dispatches(vk)
    for i, ids in enumerate(chunks):
        anchors = first_anchors and i == 0
        ref.ingest(ids, anchors=anchors)
        vk.ingest(ids, anchors=anchors)
    if grids is not None:
        grids.extend(seen)
    return vk, ref, [shader for shader, _ in seen]


def assert_tiled_prefill_then_decode(model, backend) -> None:
    """GPU workgroup shapes: the tiled products (matmul_tiled, or matmul_coopmat where the
    device has cooperative matrices) over odd chunks, then split-row decode, each held to
    numpy's state and logits."""
    vocab = model.config.vocab_size
    chunks = [prompt(n, 20 + n, vocab) for n in (70, 33)]
    vk, ref, seen = run_pair(model, backend, chunks)
    assert {"matmul_tiled", "matmul_coopmat"} & set(seen)
    n = sum(map(len, chunks))
    assert_same_state(vk, ref, n)
    for t in prompt(5, 7, vocab):
        np.testing.assert_allclose(vk.forward.decode_one_token(t),
                                   ref.forward.decode_one_token(t), atol=ATOL, rtol=0)
    assert_same_state(vk, ref, n + 5)


@pytest.mark.parametrize("qtype", [QT.F32, QT.F16, QT.Q8_0, QT.Q4_0, QT.Q4_1])
def test_tiled_prefill_matches_numpy(tmp_path_factory, vk_gpu, qtype) -> None:
    model = tiny(tmp_path_factory, qtype, tied=False, seed=7)
    ids = prompt(149, 1, model.config.vocab_size)  # chunks of 64, 64 and 21
    vk, ref, seen = run_pair(model, vk_gpu, [ids])
    assert "attention_prefill" in seen
    assert {"matmul_tiled", "matmul_coopmat"} & set(seen)
    assert_same_state(vk, ref, len(ids))


def test_odd_chunks_anchors_then_decode(tmp_path_factory, vk_gpu) -> None:
    """Anchors, then prompts whose chunks leave every tile partly filled, then decode steps
    on top of the tiled prefill's keys and values."""
    model = tiny(tmp_path_factory, QT.Q4_1, seed=2)
    vocab = model.config.vocab_size
    chunks = [prompt(n, 10 + n, vocab) for n in (19, 17, 33, 63, 1, 65)]
    vk, ref, seen = run_pair(model, vk_gpu, chunks, first_anchors=True)
    assert "attention_prefill" in seen and "attention" in seen  # 1 token: untiled
    n = sum(map(len, chunks))
    assert vk.ring.n_anchors == ref.ring.n_anchors == 19
    assert_same_state(vk, ref, n)
    for t in prompt(6, 99, vocab):
        want = ref.forward.decode_one_token(t)
        got = vk.forward.decode_one_token(t)
        np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
    assert_same_state(vk, ref, n + 6)


def test_grouped_heads_and_partial_row_tiles(tmp_path_factory, vk_gpu) -> None:
    """Three query heads per K/V head and head_dim 32 (SmolLM2 shares them 3:1), with matrices
    whose rows do not fill the 64-row tiles (q|k|v 160, wo and down 96)."""
    model = tiny(tmp_path_factory, QT.Q8_0, d_model=96, n_heads=3, n_kv_heads=1, ffn_dim=96,
                 seed=4)
    ids = prompt(100, 3, model.config.vocab_size)
    vk, ref, seen = run_pair(model, vk_gpu, [ids[:37], ids[37:]])
    assert "attention_prefill" in seen
    assert_same_state(vk, ref, len(ids))


def test_ring_eviction_over_tiled_chunks(tmp_path_factory, vk_gpu) -> None:
    """Chunks after the ring has evicted and rebased: slots are compacted, not positions."""
    model = tiny(tmp_path_factory, QT.Q4_0, seed=9)
    policy = RingPolicy(max_slots=96, recent_window=8, evict_batch=16, prefill_chunk=24)
    vocab = model.config.vocab_size
    chunks = [prompt(41, 20 + i, vocab) for i in range(9)]  # 369 tokens through a 96-slot ring
    vk, ref, seen = run_pair(model, vk_gpu, chunks, policy=policy)
    assert ref.ring.evicted > 0 and ref.ring.rebases > 0
    assert "attention_prefill" in seen
    assert_same_state(vk, ref, ref.ring.n_active)


def test_greedy_reply_after_tiled_prefill_is_numpys(tmp_path_factory, vk_gpu) -> None:
    model = tiny(tmp_path_factory, QT.Q4_1, seed=11)
    ids = prompt(90, 5, model.config.vocab_size)
    out = []
    for backend in (None, vk_gpu):
        conv = Conversation(model, POLICY, backend=backend)
        conv.ingest(ids)
        out.append(conv.generate(SamplingSettings(), 24, frozenset()).ids)
    assert out[0] == out[1]


@pytest.mark.parametrize("coopmat,tokens", [(True, 64), (True, 32), (False, 64)],
                         ids=["coopmat-64", "coopmat-32", "shared-tiles"])
def test_gpu_products_both_kinds(tmp_path_factory, vk_gpu, backend_with, coopmat,
                                 tokens) -> None:
    """On a device with cooperative matrices: both product shaders against numpy, the
    cooperative one in tiles of 64 and of 32 tokens (200 tokens: the last tile part-filled)."""
    if coopmat and not vk_gpu.ctx.coopmat:
        pytest.skip("this Vulkan device has no 16x16x16 f16 cooperative matrices")
    model = tiny(tmp_path_factory, QT.Q4_1, tied=False, seed=13)
    ids = prompt(200, 8, model.config.vocab_size)
    tuning = replace(GPU, coopmat=coopmat, coopmat_tokens=tokens)
    vk, ref, seen = run_pair(model, backend_with(tuning), [ids])
    assert ("matmul_coopmat" in seen) == coopmat and ("matmul_tiled" in seen) != coopmat
    assert_same_state(vk, ref, len(ids))


@pytest.mark.parametrize("queries,splits,run_tiles,runs", [
    (16, 1, 1, 1), (8, 3, 1, 3), (4, 16, 1, 8), (4, 16, 3, 3), (16, 16, 8, 1)])
def test_attention_query_tiles_and_slot_runs(tmp_path_factory, backend_with, queries,
                                             splits, run_tiles, runs) -> None:
    """prefill_queries, prefill_splits and prefill_run_tiles: one workgroup per query tile
    (splits 1), or runs of slots folded by the last to finish (at 232 live slots: 3 runs of
    96, 8 of 32, 3 of at least 3 tiles, or one where a run must hold 8 tiles), through
    eviction and grouped heads; salience must stay numpy's."""
    model = tiny(tmp_path_factory, QT.Q8_0, d_model=96, n_heads=3, n_kv_heads=1, ffn_dim=96,
                 seed=5)
    policy = RingPolicy(max_slots=232, recent_window=8, evict_batch=16, prefill_chunk=64)
    vocab = model.config.vocab_size
    chunks = [prompt(n, 30 + n, vocab) for n in (64, 61, 64, 41, 64, 37)]  # 331 tokens
    tuning = replace(GPU, prefill_queries=queries, prefill_splits=splits,
                     prefill_run_tiles=run_tiles)
    backend, grids = backend_with(tuning), []
    vk, ref, _ = run_pair(model, backend, chunks, policy=policy, grids=grids)
    assert ref.ring.evicted > 0
    assert prefill_runs(tuning, ref.ring.n_active)[1] == runs
    # Every chunk is a 64-token bucket: 3 heads x query tiles x runs.
    attention = {groups for shader, groups in grids if shader == "attention_prefill"}
    assert attention == {(3, 64 // queries, splits)}
    assert_same_state(vk, ref, ref.ring.n_active)


def test_routing() -> None:
    from engine.backends.vulkan.passes import PassShape

    chunk, small = PassShape(64, False, True, False), PassShape(8, False, True, False)
    decode = PassShape(1, True, True, False)
    assert tiled(GPU, chunk) and not tiled(GPU, small) and not tiled(GPU, decode)
    assert not tiled(CPU, chunk)  # lavapipe's own shapes keep matmul.comp
    assert product_tile(GPU, 64, True, 32) == ("matmul_coopmat", GPU.coopmat_tokens, 128)
    assert product_tile(replace(GPU, coopmat_tokens=32), 256, True, 32)[1] == 32
    assert product_tile(GPU, 64, False, 32) == ("matmul_tiled", 64, 256)
    assert product_tile(GPU, 40, False, 32) == ("matmul_tiled", 32, 128)
    assert product_tile(GPU, 16, False, 32) == ("matmul_tiled", 16, 64)
    assert product_tile(replace(GPU, coopmat=False), 64, True, 32)[0] == "matmul_tiled"
    # coopmat_wide: 64-token tiles for a product that still launches that many workgroups
    wide = replace(GPU, coopmat_tokens=32, coopmat_wide=256)
    assert product_tile(wide, 256, True, 32, row_tiles=64)[1] == 64  # 64 x 4 workgroups
    assert product_tile(wide, 256, True, 32, row_tiles=63)[1] == 32
    assert product_tile(wide, 64, True, 32, row_tiles=255)[1] == 32  # one token tile
    with pytest.raises(ValueError):  # attention_prefill's invocations own whole score columns
        replace(GPU, prefill_queries=6)
    with pytest.raises(ValueError, match="coopmat_tokens 32 or 64"):  # the shader's layouts
        replace(GPU, coopmat_tokens=16)


def test_attention_heads_whose_width_does_not_divide_the_workgroup(tmp_path_factory,
                                                                  backend_with) -> None:
    """Heads of 48 dimensions (12 vec4s, which 128 invocations do not divide evenly): with 16
    queries a tile an invocation owns two outputs of different columns."""
    model = tiny(tmp_path_factory, QT.Q8_0, d_model=96, n_heads=2, n_kv_heads=1, ffn_dim=96,
                 seed=6)
    assert model.config.head_dim == 48
    ids = prompt(100, 4, model.config.vocab_size)
    vk, ref, seen = run_pair(model, backend_with(replace(GPU, prefill_queries=16)), [ids])
    assert "attention_prefill" in seen
    assert_same_state(vk, ref, len(ids))
