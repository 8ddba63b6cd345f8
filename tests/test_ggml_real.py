"""The ggml backend on the shipped SmolLM2 GGUF, against the exact float32 numpy reference.

ggml quantizes activations as llama.cpp does, so it is held to llama.cpp's own fidelity rather
than to float tolerance: perplexity within 1.5% of the f32 reference, and top-1 agreement with
the reference at least as high as llama.cpp's on the same tokens (LLAMA_CPP_TOP1, measured with
scripts/llamacpp_top1.py through llama-cpp-python 0.3.36 on this GGUF).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from engine.config import RingPolicy
from engine.conversation import Conversation
from engine.sampler import SamplingSettings

pytest.importorskip("ggml", reason="ggml-python is not installed (needs a C compiler)")
pytestmark = pytest.mark.real_model

TEXT = Path(__file__).parent / "fixtures" / "long_text.txt"
TOKENS = 1024
LLAMA_CPP_TOP1 = 0.96


@pytest.fixture(scope="module")
def ggml_backend():
    from engine.backends.ggml.backend import GgmlBackend

    return GgmlBackend()


def row_logits(model, backend, ids: list[int]) -> np.ndarray:
    """Logits at every position of `ids`, from one chunked prefill."""
    conv = Conversation(model, RingPolicy(), backend=backend)
    rows: list[np.ndarray] = []

    def score(hidden: np.ndarray) -> None:
        out = np.empty((hidden.shape[0], model.config.vocab_size), np.float32)
        conv.forward.project_logits(hidden, out)
        rows.append(out)

    conv.ingest(ids, on_hidden=score)
    return np.concatenate(rows)


def mean_nll(logits: np.ndarray, ids: list[int]) -> float:
    rows, targets = logits[:-1].astype(np.float64), np.asarray(ids[1:])
    peak = rows.max(axis=1)
    log_z = np.log(np.exp(rows - peak[:, None]).sum(axis=1)) + peak
    return float((log_z - rows[np.arange(len(targets)), targets]).mean())


@pytest.fixture(scope="module")
def both(real_model, ggml_backend):
    ids = real_model.tokenizer.encode(TEXT.read_text(encoding="utf-8"))[:TOKENS]
    return ids, row_logits(real_model, None, ids), row_logits(real_model, ggml_backend, ids)


def test_perplexity_within_one_and_a_half_percent(both) -> None:
    ids, ref, got = both
    ppl_ref, ppl_got = math.exp(mean_nll(ref, ids)), math.exp(mean_nll(got, ids))
    assert abs(ppl_got / ppl_ref - 1) <= 0.015, (ppl_got, ppl_ref)


def test_top1_agreement_at_least_llama_cpps(both) -> None:
    _, ref, got = both
    agreement = float((ref.argmax(axis=1) == got.argmax(axis=1)).mean())
    assert agreement >= LLAMA_CPP_TOP1, agreement


def test_greedy_reply_says_paris(real_model, ggml_backend) -> None:
    conv = Conversation(real_model, RingPolicy(max_slots=512), backend=ggml_backend)
    prompt = real_model.template.render(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True)
    conv.ingest(real_model.tokenizer.encode(prompt))
    stop = frozenset({real_model.tokenizer.token_to_id("<|im_end|>")})
    reply = real_model.tokenizer.decode(conv.generate(SamplingSettings(), 24, stop).ids)
    assert "Paris" in reply, reply
