"""Perplexity of a text read through the engine's ring (a small ring exercises eviction)."""

from __future__ import annotations

import math

import numpy as np

from ..backends.base import Backend
from ..conversation import Conversation
from ..model.model import Model
from ..state.ring_policy import DEFAULT_EVICT, RingPolicy


def perplexity(model: Model, text: str, ring_slots: int | None = None,
               backend: Backend | None = None, evict: str = DEFAULT_EVICT) -> dict:
    base = RingPolicy(evict=evict)
    policy = base if ring_slots is None else base.scaled_to(ring_slots)
    conv = Conversation(model, policy, backend=backend)
    return read_and_score(conv, model.tokenizer.encode(text))


def read_and_score(conv: Conversation, ids: list[int]) -> dict:
    """Ingest `ids` into `conv`, scoring each next token; the conversation stays usable."""
    if len(ids) < 2:
        raise ValueError("perplexity needs a text of at least two tokens")
    model, policy = conv.model, conv.policy
    project = conv.forward.project_logits
    if not conv.forward.projects_hidden:
        raise ValueError(f"perplexity is not available on the {conv.backend.name} backend")
    logits = np.empty((policy.prefill_chunk, model.config.vocab_size), np.float32)
    targets = np.asarray(ids[1:] + [ids[-1]], np.int64)  # the last row predicts nothing
    state = {"row": 0, "nll": 0.0}

    def score(hidden: np.ndarray) -> None:
        rows = hidden.shape[0]
        start = state["row"]
        out = logits[:rows]
        project(hidden, out)
        peak = out.max(axis=1, keepdims=True)
        log_z = np.log(np.exp(out - peak).sum(axis=1)) + peak[:, 0]
        picked = out[np.arange(rows), targets[start : start + rows]]
        nll = log_z - picked
        counted = min(rows, len(ids) - 1 - start)
        state["nll"] += float(nll[:counted].sum(dtype=np.float64))
        state["row"] = start + rows

    conv.ingest(ids, on_hidden=score)
    mean_nll = state["nll"] / (len(ids) - 1)
    return {
        "tokens": len(ids),
        "perplexity": math.exp(mean_nll),
        "mean_nll": mean_nll,
        "ring_slots": policy.max_slots,
        "evict": policy.evict,
        "evicted": conv.ring.evicted,
        "rebases": conv.ring.rebases,
        "backend": conv.backend.name,
    }
