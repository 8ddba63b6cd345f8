"""The ggml backend on the shipped SmolLM2 GGUF, against the f32 reference and llama.cpp.

ggml quantizes activations as llama.cpp does, so it is held to llama.cpp's own fidelity rather
than to float tolerance: perplexity within 1.5% of the f32 (numpy) reference, top-1 agreement
with that reference at least as high as llama.cpp's on the same tokens, and llama.cpp's greedy
replies. llama.cpp's side is a committed fixture (scripts/llamacpp_reference.py, through
llama-cpp-python on this GGUF).

Note what that means for "What is the capital of France?": the f32 reference answers "The
capital of France is Paris." but its first token wins by only 0.08 logits over "L"; with 8-bit
activations llama.cpp, and ggml with it, answer "L'Étoile, la Cité, ...". The fixture records
that this is llama.cpp's reply on the same file, not a defect of ours.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from engine.conversation import Conversation
from engine.state.ring_policy import RingPolicy
from engine.tools.eval_memory_text import licence_text

from .parity import prefill_row_logits

pytest.importorskip("ggml", reason="ggml-python is not installed (needs a C compiler)")
pytestmark = pytest.mark.real_model

LLAMA_CPP = json.loads(
    (Path(__file__).parent / "fixtures" / "llamacpp_reference.json").read_text())


@pytest.fixture(scope="module")
def ggml_backend():
    from engine.backends.ggml.backend import GgmlBackend

    return GgmlBackend()


def mean_nll(logits: np.ndarray, ids: list[int]) -> float:
    rows, targets = logits[:-1].astype(np.float64), np.asarray(ids[1:])
    peak = rows.max(axis=1)
    log_z = np.log(np.exp(rows - peak[:, None]).sum(axis=1)) + peak
    return float((log_z - rows[np.arange(len(targets)), targets]).mean())


@pytest.fixture(scope="module")
def both(real_model, ggml_backend):
    ids = LLAMA_CPP["long_text"]["ids"]
    return (ids, prefill_row_logits(real_model, ids),
            prefill_row_logits(real_model, ids, ggml_backend))


def test_fixture_is_for_the_shipped_model(real_model) -> None:
    assert LLAMA_CPP["gguf_size_bytes"] == real_model.path.stat().st_size
    text = licence_text()
    ids = LLAMA_CPP["long_text"]["ids"]
    assert real_model.tokenizer.encode(text)[: len(ids)] == ids


def test_perplexity_within_one_and_a_half_percent(both) -> None:
    ids, ref, got = both
    ppl_ref, ppl_got = math.exp(mean_nll(ref, ids)), math.exp(mean_nll(got, ids))
    assert abs(ppl_got / ppl_ref - 1) <= 0.015, (ppl_got, ppl_ref)


def test_top1_agreement_at_least_llama_cpps(both) -> None:
    _, ref, got = both
    reference = ref.argmax(axis=1)
    ours = float((got.argmax(axis=1) == reference).mean())
    llama_cpp = float((np.asarray(LLAMA_CPP["long_text"]["argmax"]) == reference).mean())
    assert ours >= llama_cpp, (ours, llama_cpp)


CHATS = LLAMA_CPP["greedy"]["chats"]
# Teacher-forced on llama.cpp's own continuation, ggml must pick llama.cpp's next token at
# nearly every step. Not all: llama.cpp keeps K/V in f16 where we keep f32, so a near-tie can
# fall either way. Measured: 61 of 64 steps agree; for the haiku's first token the f32
# reference and ggml both prefer "The" over "In" (by 0.11 and 0.12 logits), llama.cpp "In".
GREEDY_AGREEMENT = 0.9


def test_greedy_replies_are_llama_cpps(real_model, ggml_backend) -> None:
    agree = total = 0
    for chat in CHATS:
        text = real_model.template.render(chat["messages"], add_generation_prompt=True)
        assert real_model.tokenizer.encode(text) == chat["prompt_ids"]
        conv = Conversation(real_model, RingPolicy(max_slots=512), backend=ggml_backend)
        logits = conv.ingest(chat["prompt_ids"])
        for want in chat["generated_ids"]:
            agree += int(np.argmax(logits)) == want
            total += 1
            logits = conv.forward.decode_one_token(want)
    assert agree / total >= GREEDY_AGREEMENT, f"{agree}/{total}"
