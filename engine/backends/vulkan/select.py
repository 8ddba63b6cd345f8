"""`--backend auto|numpy|vulkan`: which backend a process uses, and why.

`auto` takes Vulkan on a GPU; on a CPU device (lavapipe) only where a recorded measurement on
this device and model says Vulkan decodes faster (scripts/bench_vulkan.py records one);
otherwise numpy. Without a loader, driver or device it falls back to numpy with a one-line
note. `vulkan` without a device raises VulkanUnavailableError naming what is missing.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..base import Backend
from ..numpy.backend import NumpyBackend
from .loader import DeviceInfo, VulkanUnavailableError, probe
from .options import current

CHOICES = ("auto", "numpy", "vulkan")
MEASUREMENTS = "vulkan-speed.json"


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
        from .backend import VulkanBackend  # noqa: PLC0415 - needs the vulkan package

        return Choice(VulkanBackend(), None)
    info = probe()
    if isinstance(info, str):
        return Choice(NumpyBackend(), f"Vulkan unavailable ({info}); using numpy")
    if info.is_gpu or _measured_faster(info, cache_dir, model_fingerprint):
        from .backend import VulkanBackend  # noqa: PLC0415

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
    from ...model.gguf_file import fingerprint_file  # noqa: PLC0415
    from ...paths import default_model_path  # noqa: PLC0415

    path = Path(model) if model else default_model_path()
    fingerprint = fingerprint_file(path) if path.is_file() else None
    return choose_backend(requested, cache_dir, fingerprint)


def device_key(info: DeviceInfo) -> str:
    return f"{info.name} | {info.driver}"


def _measured_faster(info: DeviceInfo, cache_dir: Path | None, fingerprint: str | None) -> bool:
    if current().allow_cpu_device:  # explicit opt-in for CPU devices
        return True
    if cache_dir is None or fingerprint is None:
        return False
    record = read_measurements(cache_dir).get(device_key(info), {}).get(fingerprint)
    return bool(record) and record["vulkan_tok_s"] > record["numpy_tok_s"]


def read_measurements(cache_dir: Path) -> dict:
    try:
        data = json.loads((Path(cache_dir) / MEASUREMENTS).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_measurement(cache_dir: Path, info: DeviceInfo, fingerprint: str,
                       vulkan_tok_s: float, numpy_tok_s: float) -> None:
    """Remember decode speeds on this device and model, for `auto` to decide by."""
    path = Path(cache_dir) / MEASUREMENTS
    data = read_measurements(cache_dir)
    data.setdefault(device_key(info), {})[fingerprint] = {
        "vulkan_tok_s": round(vulkan_tok_s, 2), "numpy_tok_s": round(numpy_tok_s, 2)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)
