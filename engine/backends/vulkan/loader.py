"""Finding Vulkan: the `vulkan` CFFI package, the system loader and a driver, each optional.

Every way Vulkan can be missing becomes one VulkanUnavailableError whose message names what is
missing, so `--backend vulkan` can say it in one line and `auto` can fall back to numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from ...errors import ChannelError


class VulkanUnavailableError(ChannelError):
    """No usable Vulkan: the package, the loader or a device is missing."""


class UnsupportedTensorTypeForVulkanError(ChannelError):
    """The model has a tensor type that the Vulkan shaders cannot read."""


class UnsupportedModelForVulkanError(ChannelError):
    """The model's architecture needs a feature the Vulkan shaders do not implement."""


_vk: ModuleType | None = None


def vk() -> ModuleType:
    """The `vulkan` module, imported once; raises VulkanUnavailableError with the reason."""
    global _vk
    if _vk is not None:
        return _vk
    try:
        import vulkan  # noqa: PLC0415 - optional dependency, loaded on first use
    except ImportError:
        raise VulkanUnavailableError(
            "the Python package 'vulkan' is not installed (pip install vulkan==1.3.275.1)"
        ) from None
    except OSError:
        # The package dlopens libvulkan.so.1 at import and raises OSError without it.
        raise VulkanUnavailableError(
            "no Vulkan loader (libvulkan.so.1) on this machine "
            "(Debian: apt-get install libvulkan1 mesa-vulkan-drivers)") from None
    _vk = vulkan
    return _vk


DEVICE_TYPES = {0: "other", 1: "integrated-gpu", 2: "discrete-gpu", 3: "virtual-gpu", 4: "cpu"}


@dataclass(frozen=True)
class DeviceInfo:
    """What probe() reports about the device the backend would use."""

    name: str
    device_type: str  # one of DEVICE_TYPES' values
    driver: str
    api_version: str
    index: int  # physical device index, as CHANNEL_VULKAN_DEVICE takes it

    @property
    def is_gpu(self) -> bool:
        return self.device_type.endswith("gpu")

    def as_dict(self) -> dict:
        return {"name": self.name, "type": self.device_type, "driver": self.driver,
                "api_version": self.api_version, "index": self.index}

