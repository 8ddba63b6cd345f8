"""Recorded decode speeds of Vulkan against the CPU backends, per device and model, in the
cache folder.

`--backend auto` takes a CPU Vulkan device (lavapipe) only where such a record says Vulkan
decodes faster than the CPU backend `auto` would otherwise take (ggml, or numpy where ggml is
not installed; engine/backends/select.py). A record without that backend's speed decides
nothing: a Vulkan run measured against numpy says nothing about ggml, which is ~3x faster.
scripts/bench_vulkan.py writes the records.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...fileio import write_atomically
from .loader import DeviceInfo

MEASUREMENTS = "vulkan-speed.json"


def device_key(info: DeviceInfo) -> str:
    return f"{info.name} | {info.driver}"


def measured_faster(info: DeviceInfo, cache_dir: Path | None, fingerprint: str | None,
                    cpu_backend: str) -> bool:
    """Whether a record for this device and model says Vulkan decodes faster than
    `cpu_backend` ("ggml" or "numpy")."""
    if cache_dir is None or fingerprint is None:
        return False
    record = read_measurements(cache_dir).get(device_key(info), {}).get(fingerprint) or {}
    theirs = record.get(f"{cpu_backend}_tok_s")
    return isinstance(theirs, (int, float)) and record.get("vulkan_tok_s", 0) > theirs


def read_measurements(cache_dir: Path) -> dict:
    try:
        data = json.loads((Path(cache_dir) / MEASUREMENTS).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_measurement(cache_dir: Path, info: DeviceInfo, fingerprint: str,
                       speeds: dict[str, float]) -> None:
    """Remember decode speeds on this device and model ({"vulkan": tok/s, "ggml": tok/s,
    ...}), for `auto` to decide by."""
    path = Path(cache_dir) / MEASUREMENTS
    data = read_measurements(cache_dir)
    data.setdefault(device_key(info), {})[fingerprint] = {
        f"{name}_tok_s": round(rate, 2) for name, rate in speeds.items()}
    write_atomically(path, json.dumps(data, indent=1).encode())
