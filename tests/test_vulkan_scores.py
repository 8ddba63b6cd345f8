"""Vulkan folds each decode step's attention mass into the ring's scores on the device
(shaders/mass.comp, flags & 16), so the CPU never reads the arena back: the scores must be
numpy's, policy by policy, step by step, through evictions."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from engine.conversation import Conversation
from engine.state.ring_policy import EVICT_POLICIES, RingPolicy

from .parity import tiny


@pytest.mark.parametrize("evict", EVICT_POLICIES)
def test_device_score_update_is_the_policys_rule(tmp_path_factory, vk_backend, evict) -> None:
    model = tiny(tmp_path_factory, QT.F32, context_length=64, seed=5)
    policy = RingPolicy(max_slots=24, recent_window=4, evict_batch=3, prefill_chunk=5,
                        evict=evict)
    ids = [int(t) for t in np.random.default_rng(2).integers(3, 250, 60)]
    ref, vk = Conversation(model, policy), Conversation(model, policy, backend=vk_backend)
    for conv in (ref, vk):
        conv.ingest(ids[:5], anchors=True)
    for token in ids[5:]:
        if token % 7 == 0:  # a turn starts now and then, for `turns`
            ref.ring.mark_turn_start()
            vk.ring.mark_turn_start()
        ref.forward.decode_one_token(token)
        vk.forward.decode_one_token(token)
        n = ref.ring.n_active
        a, b = ref.arena.views(), vk.arena.views()
        assert vk.ring.n_active == n
        np.testing.assert_array_equal(b.slot_clock[:n], a.slot_clock[:n])  # same victims
        np.testing.assert_allclose(b.slot_salience[:n], a.slot_salience[:n], rtol=1e-4,
                                   atol=1e-6)
        np.testing.assert_allclose(b.mass[:n], a.mass[:n], rtol=1e-4, atol=1e-6)
    assert vk.ring.evicted > 20
