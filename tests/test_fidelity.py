"""The engine against HF transformers (float32, eager) on the same GGUF: committed fixtures.

Regenerate them with scripts/make_reference.py (docs/reference.md). An exact float32
implementation lands within ~1e-3 of the reference logits; greedy continuations must agree
token for token for 32 tokens.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engine.conversation import Conversation
from engine.state.ring_policy import RingPolicy

FIXTURES = Path(__file__).parent / "fixtures" / "reference"
INDEX = json.loads((FIXTURES / "index.json").read_text())
ARRAYS = np.load(FIXTURES / "logits.npz")
TEXTS = INDEX["logits"]["texts"]
CHATS = INDEX["greedy"]["chats"]
ATOL = 1e-3

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def all_row_logits(real_model):
    """Engine logits at every position of every fixture text, from one batched prefill."""
    out = {}
    output = real_model.weights.output
    for text in TEXTS:
        ids = ARRAYS[f"{text['name']}__ids"].tolist()
        rows: list[np.ndarray] = []
        # Small chunks: the batched path crosses chunk boundaries inside every text.
        policy = replace(RingPolicy().scaled_to(256), prefill_chunk=16)
        conv = Conversation(real_model, policy)
        conv.ingest(ids, on_hidden=lambda h, rows=rows: rows.append(h @ output.T))
        out[text["name"]] = (np.concatenate(rows), conv.arena.views().logits.copy())
    return out


def test_fixture_is_for_the_shipped_model(real_model) -> None:
    meta = INDEX["meta"]
    assert meta["gguf_file"]["size_bytes"] == real_model.path.stat().st_size
    assert meta["config"]["num_hidden_layers"] == real_model.config.n_layers


@pytest.mark.parametrize("text", TEXTS, ids=[t["name"] for t in TEXTS])
def test_tokenizer_matches_the_reference_ids(real_model, text) -> None:
    assert real_model.tokenizer.encode(text["text"]) == ARRAYS[f"{text['name']}__ids"].tolist()


@pytest.mark.parametrize("text", TEXTS, ids=[t["name"] for t in TEXTS])
def test_logits_match_reference(all_row_logits, text) -> None:
    name = text["name"]
    rows, last = all_row_logits[name]
    np.testing.assert_allclose(last, ARRAYS[f"{name}__last_logits"], atol=ATOL, rtol=0)
    np.testing.assert_allclose(rows[-1], ARRAYS[f"{name}__last_logits"], atol=ATOL, rtol=0)
    top_ids = ARRAYS[f"{name}__top_ids"]
    ours_at_top = np.take_along_axis(rows, top_ids.astype(np.int64), axis=1)
    np.testing.assert_allclose(ours_at_top, ARRAYS[f"{name}__top_logits"], atol=ATOL, rtol=0)
    subset = ARRAYS["subset_ids"].astype(np.int64)
    np.testing.assert_allclose(rows[:, subset], ARRAYS[f"{name}__subset_logits"], atol=ATOL, rtol=0)
    peak = rows.max(axis=1)
    lse = np.log(np.exp(rows - peak[:, None]).sum(axis=1)) + peak
    np.testing.assert_allclose(lse, ARRAYS[f"{name}__logsumexp"], atol=ATOL, rtol=0)
    assert (rows.argmax(axis=1) == top_ids[:, 0]).all()


@pytest.mark.parametrize("chat", CHATS, ids=[c["name"] for c in CHATS])
def test_greedy_continuations_agree_for_32_tokens(real_model, chat) -> None:
    conv = Conversation(real_model, RingPolicy(max_slots=512))
    logits = conv.ingest(chat["prompt_ids"])
    generated = []
    for _ in range(INDEX["greedy"]["new_tokens"]):
        token = int(np.argmax(logits))
        generated.append(token)
        logits = conv.forward.decode_one_token(token)  # like the reference, EOS is fed on
    assert generated == chat["generated_ids"]


@pytest.mark.parametrize("chat", CHATS, ids=[c["name"] for c in CHATS])
def test_chat_template_renders_the_reference_prompt(real_model, chat) -> None:
    text = real_model.template.render(chat["messages"], add_generation_prompt=True)
    assert text == chat["prompt_text"]
    assert real_model.tokenizer.encode(text) == chat["prompt_ids"]
