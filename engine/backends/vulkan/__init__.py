"""The Vulkan compute backend: quantized GGUF weights in device memory, the conversation's
arena in mapped host-visible memory, and SPIR-V shaders from shaders/ for every op.

Import-light: `probe()`, FEATURES and the errors work without the `vulkan` package or a
loader; the backend itself (backend.py) is imported where it is started.

| file | what it holds |
|---|---|
| backend.py | VulkanBackend: the Backend protocol; weights uploaded once, arenas handed out |
| forward.py | VulkanForward: prefill and decode as recorded passes, snapshot regions |
| passes.py | recording a forward pass into a command buffer once, re-submitted every step |
| prefill.py | prefill's tiled dispatches, for chunks of `Tuning.tiled_from` tokens or more |
| resources.py | a conversation's scratch buffers, step parameters and descriptor set |
| weights.py | the model's weights in device memory, still quantized, from the GGUF |
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

from .context import probe
from .loader import DeviceInfo, UnsupportedTensorTypeForVulkanError, VulkanUnavailableError

# The shaders implement the llama layout only (architecture.py's FEATURES lists the rest).
FEATURES: frozenset[str] = frozenset()
__all__ = ["FEATURES", "DeviceInfo", "UnsupportedTensorTypeForVulkanError",
           "VulkanUnavailableError", "probe"]

