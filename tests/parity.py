"""Shared by the backend parity tests (ggml, Vulkan): tiny models and step-by-step runs."""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as QT

from engine.conversation import Conversation
from engine.model.model import load_model
from engine.state.ring_policy import RingPolicy

from .tiny_model import TinySpec, write_tiny_gguf

TOKENS = [1, 40, 77, 200, 13, 99, 5, 250, 31, 64, 128, 7, 8, 9, 180, 44, 2, 1, 66, 67]
POLICY = RingPolicy(max_slots=64, recent_window=8, evict_batch=4, prefill_chunk=6)


def tiny(tmp_path_factory, qtype: QT, **kw):
    """A tiny random-weight model of one tensor type, written and loaded for this run."""
    path = tmp_path_factory.mktemp(f"tiny-{qtype.name}") / "tiny.gguf"
    write_tiny_gguf(path, TinySpec(tensor_type=qtype, **kw))
    return load_model(path, path.parent / "cache")


def run_steps(model, backend, ids, policy=POLICY):
    """Prefill the first 5 tokens, decode the rest; every step's logits."""
    conv = Conversation(model, policy, backend=backend)
    rows = [conv.ingest(ids[:5]).copy()]
    rows += [conv.forward.decode_one_token(t).copy() for t in ids[5:]]
    return np.stack(rows), conv


def run_noting_eviction(model, ids: list[int], policy: RingPolicy
                        ) -> tuple[list[np.ndarray], Conversation, int | None]:
    """Prefill 5 tokens, decode the rest; every step's logits, and the first step at which
    the ring had evicted."""
    conv = Conversation(model, policy)
    rows, first_eviction = [conv.ingest(ids[:5]).copy()], None
    for t in ids[5:]:
        rows.append(conv.forward.decode_one_token(t).copy())
        if first_eviction is None and conv.ring.evicted:
            first_eviction = len(rows) - 1
    return rows, conv, first_eviction


def prefill_row_logits(model, ids, backend=None, policy: RingPolicy | None = None) -> np.ndarray:
    """Logits after every prefix of `ids`: one chunked prefill's hidden rows, projected."""
    conv = Conversation(model, policy or RingPolicy(), backend=backend)
    rows: list[np.ndarray] = []

    def keep(hidden: np.ndarray) -> None:
        out = np.empty((hidden.shape[0], model.config.vocab_size), np.float32)
        conv.forward.project_logits(hidden, out)
        rows.append(out)

    conv.ingest(ids, on_hidden=keep)
    return np.concatenate(rows)
