"""Compute backends: where a conversation's arena lives and what runs its forward pass.

A backend supplies the arena's single payload allocation (ordinary memory for numpy, mapped
host-visible device memory for Vulkan) and a forward pass with numpy `Forward`'s contract:
`prefill(tokens, anchors=, on_hidden=, should_stop=)` and `decode_one_token(token)`, both
reserving and committing ring slots, writing post-RoPE keys and values into the arena's
`k_cache`/`v_cache`, accumulating attention mass into `mass`, and leaving next-token logits in
`logits`. Everything else (ring policy, sampler, snapshots) is shared and backend-agnostic.

Implementations: `numpy/` (NumpyBackend) and `vulkan/` (VulkanBackend); select.py picks
one for a process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from ..model.model import Model
from ..state.arena import Allocator, ScratchPlan
from ..state.ring import KVRing, SlotSpan

HiddenCallback = Callable[[np.ndarray], None]  # receives final-normed hidden rows (C, d_model)
ChunkPass = Callable[[SlotSpan, Sequence[int], bool], None]  # (span, chunk, is the last one)


def prefill_in_chunks(ring: KVRing, tokens: Sequence[int], chunk_limit: int,
                      run_chunk: ChunkPass, *, anchors: bool = False,
                      should_stop: Callable[[], bool] | None = None,
                      scored: bool = False) -> bool:
    """Every backend's prefill loop: reserve ring slots for a chunk of at most `chunk_limit`
    tokens, run the backend's pass over it, commit it. `should_stop` is polled between chunks;
    a stop leaves every committed chunk in place and returns False. `scored`: the pass folds
    its mass into the ring's scores itself (KVRing.commit)."""
    if not tokens:
        raise ValueError("prefill needs at least one token")
    limit = min(chunk_limit, ring.max_admit())
    if limit < 1:
        raise ValueError("the ring has no room for new tokens (anchors fill it)")
    for start in range(0, len(tokens), limit):
        if should_stop is not None and should_stop():
            return False
        chunk = tokens[start : start + limit]
        span = ring.reserve(len(chunk))
        run_chunk(span, chunk, start + limit >= len(tokens))
        ring.commit(span, ring.arena.views().mass, anchors=anchors, scored=scored)
    return True


class ForwardPass(Protocol):
    def prefill(self, tokens: list[int], *, anchors: bool = False,
                on_hidden: HiddenCallback | None = None,
                should_stop=None) -> np.ndarray | None: ...

    def decode_one_token(self, token: int) -> np.ndarray: ...


class Backend(Protocol):
    name: str
    needs_f32_weights: bool
    key_dtype: np.dtype  # what the arena keeps keys in (values are always f32)
    scratch: ScratchPlan | None  # adds the forward pass's own arena regions, if it has any

    def arena_allocator(self) -> Allocator | None: ...

    def make_forward(self, model: Model, ring: KVRing) -> ForwardPass: ...

    def describe(self) -> dict: ...

