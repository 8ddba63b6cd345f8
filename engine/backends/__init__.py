"""Compute backends: where a conversation's arena lives and what runs its forward pass.

One package each behind the `Backend` protocol (base.py): `ggml/`, the quantized CPU default
(the GGUF's own blocks through ggml's kernels); `numpy/`, the exact float32 reference; and
`vulkan/`, compute shaders on a GPU. select.py picks one for a process. Each backend declares
the architecture features it implements (`Backend.features`), and
`engine.model.architecture.backend_problem` says why one cannot run a model.
"""

# `--backend` of the engine process (and of `channel`, which passes it on): select.py.
BACKEND_CHOICES = ("auto", "ggml", "numpy", "vulkan")
