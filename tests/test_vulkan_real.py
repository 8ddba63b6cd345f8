"""The shipped SmolLM2 (Q4_1 layers, Q8_0 embeddings) on Vulkan: the HF reference's greedy
continuation token for token, and its logits within the fidelity tolerance."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.conversation import Conversation
from engine.state.ring_policy import RingPolicy

FIXTURES = Path(__file__).parent / "fixtures" / "reference"
pytestmark = [pytest.mark.real_model, pytest.mark.slow]


def test_greedy_reply_and_logits_match_the_reference(real_model, vk_backend) -> None:
    index = json.loads((FIXTURES / "index.json").read_text())
    arrays = np.load(FIXTURES / "logits.npz")
    chat = index["greedy"]["chats"][0]
    conv = Conversation(real_model, RingPolicy(max_slots=512), backend=vk_backend)
    logits = conv.ingest(chat["prompt_ids"])
    generated = []
    for _ in range(16):
        token = int(np.argmax(logits))
        generated.append(token)
        logits = conv.forward.decode_one_token(token)
    assert generated == chat["generated_ids"][:16]

    text = index["logits"]["texts"][0]["name"]
    conv = Conversation(real_model, RingPolicy(max_slots=512), backend=vk_backend)
    last = conv.ingest(arrays[f"{text}__ids"].tolist())
    np.testing.assert_allclose(last, arrays[f"{text}__last_logits"], atol=1e-3, rtol=0)
