"""The ggml backend: the GGUF's own quantized blocks through ggml's CPU kernels (the quantized
CPU default), the arena in ordinary memory."""

from ...model.architecture import ALL_FEATURES

FEATURES = ALL_FEATURES
