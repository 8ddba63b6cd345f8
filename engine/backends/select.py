"""`--backend auto|numpy|vulkan`: which backend a process uses, and why.

`auto` takes Vulkan on a GPU; on a CPU device (lavapipe) only where a recorded measurement on
this device and model says Vulkan decodes faster (vulkan/measurements.py keeps them;
scripts/bench_vulkan.py records one); otherwise numpy. Without a loader, driver or device it
falls back to numpy with a one-line note. `vulkan` without a device raises
VulkanUnavailableError naming what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .base import Backend
from .numpy.backend import NumpyBackend
from .vulkan.context import probe
from .vulkan.loader import DeviceInfo, VulkanUnavailableError
from .vulkan.measurements import measured_faster
from .vulkan.options import current

CHOICES = ("auto", "numpy", "vulkan")


@dataclass(frozen=True)
class Choice:
    backend: Backend
    note: str | None  # one line for the user (a fallback and its reason), or None


def choose_backend(requested: str, cache_dir: Path | None = None,
                   model_fingerprint: str | None = None) -> Choice:
    if requested not in CHOICES:
        raise ValueError(f"unknown backend {requested!r} (choose from {', '.join(CHOICES)})")
    if requested == "numpy":
        return Choice(NumpyBackend(), None)
    if requested == "vulkan":
        from .vulkan.backend import VulkanBackend  # noqa: PLC0415 - needs the vulkan package

        return Choice(VulkanBackend(), None)
    info = probe()
    if isinstance(info, str):
        return Choice(NumpyBackend(), f"Vulkan unavailable ({info}); using numpy")
    if info.is_gpu or _vulkan_on_cpu_device(info, cache_dir, model_fingerprint):
        from .vulkan.backend import VulkanBackend  # noqa: PLC0415

        try:
            return Choice(VulkanBackend(), None)
        except VulkanUnavailableError as exc:
            return Choice(NumpyBackend(), f"Vulkan unavailable ({exc}); using numpy")
    return Choice(NumpyBackend(), None)


def backend_for_model(requested: str, model: Path | None, cache_dir: Path) -> Choice:
    """choose_backend for the GGUF at `model` (default: the shipped one), keyed by its
    fingerprint so that `auto` can consult this device's recorded measurement."""
    if requested == "numpy":
        return Choice(NumpyBackend(), None)
    from ..model.gguf_file import fingerprint_file  # noqa: PLC0415
    from ..paths import default_model_path  # noqa: PLC0415

    path = Path(model) if model else default_model_path()
    fingerprint = fingerprint_file(path) if path.is_file() else None
    return choose_backend(requested, cache_dir, fingerprint)


def _vulkan_on_cpu_device(info: DeviceInfo, cache_dir: Path | None,
                          fingerprint: str | None) -> bool:
    if current().allow_cpu_device:  # explicit opt-in for CPU devices
        return True
    return measured_faster(info, cache_dir, fingerprint)
