"""NumpyBackend: the Backend protocol (engine/backends/base.py) on the CPU with numpy.

The arena is ordinary memory and the forward pass is numpy `Forward` (forward.py) over the
model's dequantized f32 weight image.
"""

from __future__ import annotations

from ...model.config import ModelConfig
from ...model.model import Model
from ...state.arena import Allocator
from ...state.kv_format import REFERENCE
from ...state.ring import KVRing
from ..base import ForwardPass
from . import FEATURES
from .forward import Forward
from .scratch import add_numpy_scratch


class NumpyBackend:
    name = "numpy"
    needs_f32_weights = True
    kv_format = REFERENCE
    scratch = staticmethod(add_numpy_scratch)  # Forward's intermediates live in the arena
    features = FEATURES

    def arena_allocator(self) -> Allocator | None:
        return None

    def make_forward(self, model: Model, ring: KVRing) -> ForwardPass:
        if model.weights is None:
            raise ValueError("the numpy backend needs the model loaded with its f32 image")
        return Forward(model.weights, ring)

    def shape_problem(self, cfg: ModelConfig) -> str | None:
        return None  # the reference runs every size it loads

    def describe(self) -> dict:
        return {"backend": self.name, "arena_memory": "host"}
