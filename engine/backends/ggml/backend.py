"""GgmlBackend: the Backend protocol on ggml's CPU kernels over the GGUF's own blocks.

One backend serves every conversation of a process: it maps each model's GGUF once and owns
ggml's CPU compute backend (its thread pool). Arenas are ordinary prefaulted memory, as for
numpy, so snapshots and every ring operation are shared code.
"""

from __future__ import annotations

import os

from ...arena import Allocator
from ...model import Model
from ...ring import KVRing
from .forward import GgmlForward
from .lib import ggml
from .weights import GgmlWeights


def default_threads() -> int:
    """One thread per core this process may run on."""
    return max(1, len(os.sched_getaffinity(0)))


class GgmlBackend:
    name = "ggml"
    needs_f32_weights = False

    def __init__(self, threads: int | None = None):
        g = ggml()  # raises GgmlUnavailableError with the reason
        self._compute = g.ggml_backend_cpu_init()
        if not self._compute:
            raise RuntimeError("ggml could not start its CPU backend")
        self.threads = threads or default_threads()
        g.ggml_backend_cpu_set_n_threads(self._compute, self.threads)
        self._weights: dict[str, GgmlWeights] = {}

    def arena_allocator(self) -> Allocator | None:
        return None

    def make_forward(self, model: Model, ring: KVRing) -> GgmlForward:
        weights = self._weights.get(model.fingerprint)
        if weights is None:
            weights = self._weights[model.fingerprint] = GgmlWeights(model)
        return GgmlForward(self._compute, weights, ring)

    def describe(self) -> dict:
        weights = next(iter(self._weights.values()), None)
        return {
            "backend": self.name,
            "arena_memory": "host",
            "threads": self.threads,
            "weights_bytes": weights.nbytes if weights else 0,
            "weight_types": weights.type_names() if weights else {},
        }
