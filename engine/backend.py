"""Compute backends: where a conversation's arena lives and what runs its forward pass.

A backend supplies the arena's single payload allocation (ordinary memory for numpy, mapped
host-visible device memory for Vulkan) and a forward pass with numpy `Forward`'s contract:
`prefill(tokens, anchors=, on_hidden=, should_stop=)` and `decode_one_token(token)`, both
reserving and committing ring slots, writing post-RoPE keys and values into the arena's
`k_cache`/`v_cache`, accumulating attention mass into `mass`, and leaving next-token logits in
`logits`. Everything else (ring policy, sampler, snapshots) is shared and backend-agnostic.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from .arena import Allocator
from .forward import Forward, HiddenCallback
from .model import Model
from .ring import KVRing


class ForwardPass(Protocol):
    def prefill(self, tokens: list[int], *, anchors: bool = False,
                on_hidden: HiddenCallback | None = None,
                should_stop=None) -> np.ndarray | None: ...

    def decode_one_token(self, token: int) -> np.ndarray: ...


class Backend(Protocol):
    name: str
    needs_f32_weights: bool

    def arena_allocator(self) -> Allocator | None: ...

    def make_forward(self, model: Model, ring: KVRing) -> ForwardPass: ...

    def describe(self) -> dict: ...


class NumpyBackend:
    name = "numpy"
    needs_f32_weights = True

    def arena_allocator(self) -> Allocator | None:
        return None

    def make_forward(self, model: Model, ring: KVRing) -> ForwardPass:
        if model.weights is None:
            raise ValueError("the numpy backend needs the model loaded with its f32 image")
        return Forward(model.weights, ring)

    def describe(self) -> dict:
        return {"backend": self.name, "arena_memory": "host"}
