"""The Vulkan compute backend: quantized GGUF weights in device memory, the conversation's
arena in mapped host-visible memory, and SPIR-V shaders from shaders/ for every op.

Import-light: `probe()`, FEATURES and the errors work without the `vulkan` package or a
loader; the backend itself (backend.py) is imported where it is started.

| file | what it holds |
|---|---|
| backend.py | VulkanBackend: the Backend protocol; weights uploaded once, arenas handed out |
| forward.py | VulkanForward: prefill and decode as recorded passes, snapshot regions |
| passes.py | recording a forward pass into a command buffer once, re-submitted every step |
| window.py | recording a WINDOW layer's attention over its circular plane (Gemma 3) |
| prefill.py | prefill's tiled dispatches, for chunks of `Tuning.tiled_from` tokens or more |
| recurrent.py | CONV and DELTA layers' dispatches (LFM2's short convolution, Qwen3.5's delta net) |
| resources.py | a conversation's scratch buffers, step parameters and descriptor set |
| weights.py | the model's weights in device memory, still quantized, from the GGUF |
| chunks.py | where each matrix goes: offsets within chunks that fit one texel view |
| encodings.py | the block encodings the shaders read; Q5_x and K-quants re-encoded, exactly |
| pipelines.py | compute pipelines: the committed SPIR-V, one layout, specialization constants |
| tuning.py | workgroup shapes per device kind, and the matmul tiling they imply |
| coopmat.py | whether the device runs matmul_coopmat.comp, and what to enable for it |
| context.py | one device per process (instance, device, compute queue) and probe() |
| loader.py | finding the `vulkan` package, the system loader and a driver; the errors |
| buffers.py | one VkBuffer bound to its own memory, optionally mapped into numpy |
| upload.py | one-shot command buffers: staging copies and fills, waited on |
| submit.py | re-submitting a recorded command buffer: every decode step's hot path |
| profiler.py | GPU time per dispatch, from timestamps after every dispatch |
| measurements.py | recorded decode speeds against the CPU backends, which `auto` consults |
| options.py | the backend's explicit knobs, set by entry points with configure() |
| compile.py | `python -m engine.backends.vulkan.compile`: shaders/*.comp to SPIR-V |
"""

from gguf import GGMLQuantizationType as _QT

from ...model.tensor_types import features_of
from .context import probe
from .encodings import SOURCES
from .loader import DeviceInfo, UnsupportedTensorTypeForVulkanError, VulkanUnavailableError

# The tensor types the shaders read, as stored or re-encoded at upload (encodings.py's
# SOURCES; shaders/common.glsl's QT_*). Declared as features, so that a model with any other
# type (Q2_K, BF16, IQ) is refused by backend_problem before its weights are uploaded,
# and `auto` runs it on a CPU.
READ_TYPES: frozenset[_QT] = frozenset(_QT(t) for t in SOURCES)
# Beyond the llama layout the shaders implement these architecture FEATURES (architecture.py),
# each behind a specialization constant, so a model that does not need one runs none of it.
ARCH_FEATURES: frozenset[str] = frozenset({"split_half_rope", "qkv_bias", "qk_norm",
                                           "wide_heads", "fused_qkv", "fused_gate_up",
                                           "conv_layers", "delta_layers", "gated_query",
                                           "partial_rotary", "window_layers", "post_norms",
                                           "geglu", "embed_scale"})
FEATURES: frozenset[str] = features_of(READ_TYPES) | ARCH_FEATURES
__all__ = ["FEATURES", "READ_TYPES", "DeviceInfo", "UnsupportedTensorTypeForVulkanError",
           "VulkanUnavailableError", "probe"]

