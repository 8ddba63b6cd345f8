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

from collections.abc import Callable
from typing import Protocol

import numpy as np

from ..model.model import Model
from ..state.arena import Allocator, ScratchPlan
from ..state.ring import KVRing

HiddenCallback = Callable[[np.ndarray], None]  # receives final-normed hidden rows (C, d_model)


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

