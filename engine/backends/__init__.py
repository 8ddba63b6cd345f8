"""Compute backends: where a conversation's arena lives and what runs its forward pass.

One package each behind the `Backend` protocol (base.py): `ggml/`, the quantized CPU default
(the GGUF's own blocks through ggml's kernels); `numpy/`, the exact float32 reference; and
`vulkan/`, compute shaders on a GPU. select.py picks one for a process. Each backend declares
the architecture features it implements (`Backend.features`), and
`engine.model.architecture.backend_problem` says why one cannot run a model.
"""

from collections.abc import Collection

# `--backend` of the engine process (and of `channel`, which passes it on): select.py.
BACKEND_CHOICES = ("auto", "ggml", "numpy", "vulkan")
BACKEND_NAMES = BACKEND_CHOICES[1:]


def declared_features() -> dict[str, frozenset[str]]:
    """Each backend's FEATURES, without starting any (no device, no ggml build needed)."""
    from . import ggml, numpy, vulkan  # noqa: PLC0415 - subpackages import this module

    return {"ggml": ggml.FEATURES, "numpy": numpy.FEATURES, "vulkan": vulkan.FEATURES}


def problems_running(needed: Collection[str], architecture: str) -> dict[str, str | None]:
    """For each backend, why it cannot run a model of `architecture` needing `needed`
    (architecture.needed_features), or None: what `channel doctor` and `models` show."""
    from ..model.architecture import backend_problem  # noqa: PLC0415

    return {name: backend_problem(needed, architecture, name, features)
            for name, features in declared_features().items()}
