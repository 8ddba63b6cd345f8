"""Recorded decode speeds of Vulkan against numpy, per device and model, in the cache folder.

`--backend auto` takes a CPU Vulkan device (lavapipe) only where such a record says Vulkan
decodes faster (engine/backends/select.py); scripts/bench_vulkan.py writes the records.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...fileio import write_atomically
from .loader import DeviceInfo

MEASUREMENTS = "vulkan-speed.json"


def device_key(info: DeviceInfo) -> str:
    return f"{info.name} | {info.driver}"


def measured_faster(info: DeviceInfo, cache_dir: Path | None, fingerprint: str | None) -> bool:
    """Whether a record for this device and model says Vulkan decodes faster than numpy."""
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
    write_atomically(path, json.dumps(data, indent=1).encode())
