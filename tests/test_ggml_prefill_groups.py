"""ggml prefill groups (engine/backends/ggml/forward.py's GROUP_CHUNKS): several prefill
chunks in one graph, each quantized matrix expanded once for all of them, leave the arena
exactly as the same chunks run one graph each: the same keys, values, carries and logits,
and the same salience, because the ring commits a group's chunks one by one."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from engine.backends.ggml.backend import GgmlBackend
from engine.conversation import Conversation
from engine.model.architecture import CONV, FULL
from engine.state.arena import LAYER_PLANES, STATE_REGIONS
from engine.state.ring_policy import RingPolicy

from .parity import tiny

pytest.importorskip("ggml", exc_type=ImportError)

CHUNK = 32  # the smallest chunk whose matrices are expanded (forward.py's DEQUANTIZE_FROM)
POLICY = RingPolicy(max_slots=256, recent_window=8, evict_batch=4, prefill_chunk=CHUNK)
# Q4_1 (the shipped model's type) is expanded for a chunk; ggml repacks Q4_0 instead
MODELS = {
    "llama": dict(context_length=512),
    "qwen3": dict(architecture="qwen3", head_dim=32, context_length=512),
    "lfm2": dict(architecture="lfm2", n_layers=4, layer_kinds=(CONV, CONV, FULL, CONV),
                 tied=False, context_length=512),
    "qwen35": dict(architecture="qwen35", n_layers=4, head_dim=32, rope_dim=8, conv_kernel=4,
                   delta_heads=(2, 4, 16), tied=False, context_length=512),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request, tmp_path_factory):
    return tiny(tmp_path_factory, QT.Q4_1, **MODELS[request.param])


def tokens(count: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(3, 250, count).tolist()


def run(model, ids: list[int], *, grouped: bool, policy: RingPolicy = POLICY
        ) -> tuple[Conversation, list[tuple[int, int]]]:
    """Ingest `ids` in one prefill and decode four tokens; the conversation, and the
    (tokens, chunk) of each prefill graph."""
    conv = Conversation(model, policy, backend=GgmlBackend())
    forward, passes = conv.forward, []
    if not grouped:
        forward.group_limit = 0
    run_pass = forward._prefill_pass

    def noted(span, group, chunk, **kw):
        passes.append((len(group), chunk))
        return run_pass(span, group, chunk, **kw)

    forward._prefill_pass = noted
    conv.ingest(ids)
    for token in (5, 17, 99, 3):
        forward.decode_one_token(token)
    return conv, passes


def assert_same_state(a: Conversation, b: Conversation) -> None:
    va, vb = a.ring.arena.views(), b.ring.arena.views()
    for name in STATE_REGIONS + LAYER_PLANES + ("logits",):
        if hasattr(va, name):
            np.testing.assert_array_equal(getattr(va, name), getattr(vb, name), err_msg=name)


def test_a_group_leaves_the_arena_as_its_chunks_one_graph_each(model) -> None:
    ids = tokens(200)  # a group of 4 chunks, one of 2, then 8 tokens alone
    grouped, passes = run(model, ids, grouped=True)
    chunked, chunk_passes = run(model, ids, grouped=False)
    assert passes == [(128, CHUNK), (64, CHUNK), (8, 8)]
    assert chunk_passes == [(CHUNK, CHUNK)] * 6 + [(8, 8)]
    assert_same_state(grouped, chunked)


def test_chunks_that_need_an_eviction_run_alone_and_evict_the_same_slots(model) -> None:
    policy = RingPolicy(max_slots=160, recent_window=8, evict_batch=4, prefill_chunk=CHUNK)
    ids = tokens(300, seed=1)  # 128 fit whole; the chunks after them evict
    grouped, passes = run(model, ids, grouped=True, policy=policy)
    chunked, _ = run(model, ids, grouped=False, policy=policy)
    assert passes[0] == (128, CHUNK) and all(count <= CHUNK for count, _ in passes[1:])
    assert grouped.ring.evicted
    assert_same_state(grouped, chunked)


def test_a_stop_inside_a_group_commits_none_of_its_chunks(model) -> None:
    conv = Conversation(model, POLICY, backend=GgmlBackend())
    polls = []

    def stop_inside_the_graph() -> bool:  # the loop polls once, then ggml after each node
        polls.append(1)
        return len(polls) > 50

    assert conv.forward.prefill(tokens(128), should_stop=stop_inside_the_graph) is None
    assert len(polls) > 50 and conv.ring.n_active == 0 and conv.ring.clock == 0


@pytest.mark.parametrize("spec", [dict(tensor_type=QT.Q4_0),  # repacked: nothing to save
                                  dict(architecture="gemma3", n_layers=6, head_dim=32,
                                       sliding_window=8, tied=False,
                                       tensor_type=QT.Q4_1)])  # window planes
def test_models_whose_chunks_would_not_gain_run_one_chunk_a_graph(tmp_path_factory, spec):
    model = tiny(tmp_path_factory, spec.pop("tensor_type"), context_length=512, **spec)
    conv, passes = run(model, tokens(100), grouped=True)
    assert conv.forward.group_limit == 0
    assert passes == [(CHUNK, CHUNK)] * 3 + [(4, 4)]


def test_a_deep_model_s_group_has_room_for_its_nodes(tmp_path_factory) -> None:
    """80 layers in a group of four blocks take about 10,000 graph nodes, past the 8,192
    every graph once had (ggml aborts the process when a graph overflows)."""
    model = tiny(tmp_path_factory, QT.Q4_1, n_layers=80, context_length=512)
    grouped, passes = run(model, tokens(128), grouped=True)
    chunked, _ = run(model, tokens(128), grouped=False)
    assert passes == [(128, CHUNK)]
    assert_same_state(grouped, chunked)
