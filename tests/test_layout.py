"""The checked arena layout: offsets, alignment, totals and non-overlap for real geometries."""

from __future__ import annotations

import numpy as np
import pytest

from engine.align import ALIGN
from engine.errors import LayoutError, LayoutSealedError
from engine.model.config import ModelConfig
from engine.state.arena import STATE_REGIONS, conversation_layout
from engine.state.layout import ArenaLayout
from engine.state.ring_policy import RingPolicy

SMOLLM2 = ModelConfig(
    n_layers=30, d_model=576, n_heads=9, n_kv_heads=3, head_dim=64, ffn_dim=1536,
    vocab_size=49152, context_length=8192, rope_theta=100000.0, rms_eps=1e-5,
    tied_embeddings=True,
)
# The seed documents' production geometry: 48 layers.
SEED_48 = ModelConfig(
    n_layers=48, d_model=2048, n_heads=32, n_kv_heads=8, head_dim=64, ffn_dim=8192,
    vocab_size=65536, context_length=32768, rope_theta=1000000.0, rms_eps=1e-5,
    tied_embeddings=False,
)
TINY = ModelConfig(
    n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, head_dim=16, ffn_dim=128,
    vocab_size=267, context_length=256, rope_theta=10000.0, rms_eps=1e-5, tied_embeddings=True,
)
GEOMETRIES = [
    (SMOLLM2, RingPolicy()),
    (SMOLLM2, RingPolicy().scaled_to(512)),
    (SEED_48, RingPolicy()),
    (TINY, RingPolicy().scaled_to(64)),
]


@pytest.mark.parametrize(
    ("cfg", "policy"), GEOMETRIES, ids=["smollm2", "smollm2-512", "seed48", "tiny"]
)
def test_offset_map_is_aligned_ordered_and_disjoint(cfg: ModelConfig, policy: RingPolicy) -> None:
    layout = conversation_layout(cfg, policy)
    assert layout.sealed
    regions = sorted(layout.regions, key=lambda r: r.offset)
    for r in regions:
        assert r.offset % ALIGN == 0, r.name
        assert r.nbytes == r.dtype.itemsize * int(np.prod(r.shape, dtype=np.int64))
    for a, b in zip(regions, regions[1:]):
        assert a.end <= b.offset, f"{a.name} overlaps {b.name}"
    assert layout.total_bytes == -(-regions[-1].end // ALIGN) * ALIGN
    assert all(name in layout for name in STATE_REGIONS)


def test_smollm2_kv_planes_have_the_expected_exact_size() -> None:
    layout = conversation_layout(SMOLLM2, RingPolicy())
    k = layout["k_cache"]
    assert k.shape == (30, 4096, 192)
    assert k.nbytes == 30 * 4096 * 192 * 4 == 94_371_840
    assert layout["v_cache"].offset == k.end  # 94 MB is already a multiple of 64
    assert layout["slot_clock"].dtype == np.uint64


def test_seed_geometry_total_is_computed_exactly() -> None:
    layout = conversation_layout(SEED_48, RingPolicy())
    kv = 2 * 48 * 4096 * (8 * 64) * 4
    assert layout["k_cache"].nbytes + layout["v_cache"].nbytes == kv
    assert layout.total_bytes >= kv


def test_layout_rejects_bad_dimensions_and_use_after_seal() -> None:
    lay = ArenaLayout()
    with pytest.raises(LayoutError, match="non-negative int"):
        lay.add("neg", np.float32, (4, -1))
    with pytest.raises(LayoutError, match="non-negative int"):
        lay.add("float", np.float32, (4.0,))
    with pytest.raises(LayoutError, match="exceeds"):
        lay.add("huge", np.float32, (1 << 30, 1 << 30))
    lay.add("ok", np.float32, (3,))
    with pytest.raises(LayoutError, match="already exists"):
        lay.add("ok", np.float32, (3,))
    lay.seal()
    with pytest.raises(LayoutSealedError):
        lay.add("late", np.float32, (3,))


def test_ring_larger_than_context_is_refused() -> None:
    with pytest.raises(LayoutError, match="context length"):
        conversation_layout(TINY, RingPolicy(max_slots=512))
