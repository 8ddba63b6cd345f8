"""The ggml decode step's grouped Q.K product (engine/backends/ggml/attend.py): several K/V
heads per product, each query zero-padded to the group's width. The padding adds exact zeros,
so the step must give the same logits, bit for bit, as one product per head."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from .parity import TOKENS, run_steps, tiny
from .test_ggml_parity import REL_F16, close

pytest.importorskip("ggml", reason="ggml-python is not installed (needs a C compiler)")

from engine.backends.ggml import graph  # noqa: E402
from engine.backends.ggml.attend import key_group, query_blocks  # noqa: E402


@pytest.mark.parametrize(("head_dim", "kv_heads", "group_size", "heads"), [
    (64, 3, 3, 3),  # SmolLM2-135M: the three heads together
    (64, 8, 2, 2),  # LFM2: pairs
    (64, 2, 7, 2),  # Qwen2.5-0.5B
    (32, 8, 2, 4),  # four 32-wide heads reach 128
    (64, 1, 4, 1),  # one K/V head: nothing to group
    (64, 5, 2, 1),  # no divisor of 5 up to MAX_GROUP reaches 128
    (16, 2, 2, 1),  # two 16-wide heads fall short of 128: not worth the padding
    (128, 8, 4, 1),  # 128-wide heads gained nothing measured
    (256, 2, 4, 1),
    (64, 32, 1, 1),  # no GQA (the 1.7B shape): pairs measured slower
])
def test_key_group_takes_heads_until_the_slices_reach_the_row_width(
        head_dim, kv_heads, group_size, heads) -> None:
    assert key_group(head_dim, kv_heads, group_size) == heads


def test_query_blocks_give_each_query_its_own_heads_dot() -> None:
    hd, G, KVH = 64, 2, 8
    heads = key_group(hd, KVH, G)
    rng = np.random.default_rng(0)
    q = rng.standard_normal((KVH * G, hd)).astype(np.float32)  # query head j reads K/V j // G
    keys = rng.standard_normal((10, KVH * hd)).astype(np.float32)  # (slots, kv_dim)
    blocks = query_blocks(hd, KVH, G, heads)  # (groups, heads*G, heads, hd)
    padded = blocks * q.reshape(KVH // heads, heads * G, 1, hd)
    padded = padded.reshape(KVH // heads, heads * G, heads * hd)
    rows = keys.reshape(10, KVH // heads, heads * hd)
    got = np.einsum("sgw,gjw->gjs", rows, padded).reshape(KVH * G, 10)
    want = np.stack([keys[:, (j // G) * hd:(j // G + 1) * hd] @ q[j] for j in range(KVH * G)])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def ggml_backend():
    from engine.backends.ggml.backend import GgmlBackend

    return GgmlBackend()


@pytest.mark.parametrize(("n_heads", "kv_heads", "d_model"), [(4, 2, 256), (6, 3, 384)])
def test_grouped_decode_matches_numpy_and_the_per_head_product_exactly(
        tmp_path_factory, ggml_backend, monkeypatch, n_heads, kv_heads, d_model) -> None:
    model = tiny(tmp_path_factory, QT.F32, n_heads=n_heads, n_kv_heads=kv_heads,
                 d_model=d_model)
    assert key_group(model.config.head_dim, kv_heads, model.config.group_size) > 1
    want, _ = run_steps(model, None, TOKENS)
    grouped, _ = run_steps(model, ggml_backend, TOKENS)
    close(grouped, want, REL_F16)
    # one product per K/V head, as before grouping
    monkeypatch.setattr(graph, "key_group", lambda *shape: 1)
    per_head, _ = run_steps(model, ggml_backend, TOKENS)
    np.testing.assert_array_equal(grouped, per_head)
