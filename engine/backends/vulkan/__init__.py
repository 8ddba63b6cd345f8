"""The Vulkan compute backend: quantized GGUF weights in device memory, the conversation's
arena in mapped host-visible memory, and SPIR-V shaders from shaders/ for every op.

Import-light: `probe()` and the errors work without the `vulkan` package or a loader; the
backend itself is imported on demand.
"""

from .context import probe
from .loader import DeviceInfo, UnsupportedTensorTypeForVulkanError, VulkanUnavailableError

# The shaders implement the llama layout only (architecture.py's FEATURES lists the rest).
FEATURES: frozenset[str] = frozenset()
__all__ = ["FEATURES", "DeviceInfo", "UnsupportedTensorTypeForVulkanError",
           "VulkanUnavailableError", "probe", "VulkanBackend"]


def __getattr__(name: str):
    if name == "VulkanBackend":
        from .backend import VulkanBackend  # noqa: PLC0415 - needs the vulkan package

        return VulkanBackend
    raise AttributeError(name)
