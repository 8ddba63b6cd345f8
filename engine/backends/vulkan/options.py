"""Explicit knobs for the Vulkan backend. The entry point (CLI, tests, benchmarks) sets them
with configure(); library code never reads the environment."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_SHADER_DIR = Path(__file__).resolve().parents[3] / "shaders"


@dataclass(frozen=True)
class VulkanOptions:
    device_index: int | None = None  # physical device to use; None picks the best one
    tuning: str | None = None  # "gpu" or "cpu" forces workgroup shapes; None: by device type
    force_staging: bool = False  # stage snapshots/logits even where mapped memory is fast
    allow_cpu_device: bool = False  # `auto` may pick a CPU device without a measurement
    shader_dir: Path = field(default=DEFAULT_SHADER_DIR)


_current = VulkanOptions()


def configure(options: VulkanOptions) -> None:
    """Set the options for this process; takes effect for contexts and backends made after."""
    global _current
    _current = options


def current() -> VulkanOptions:
    return _current
