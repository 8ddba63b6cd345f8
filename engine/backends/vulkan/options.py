"""Explicit knobs for the Vulkan backend. The entry point (CLI, tests, benchmarks) sets them
with configure(); library code never reads the environment."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

# The committed SPIR-V is package data of this package: engine/backends/vulkan/shaders is a
# link to the repository's shaders/ folder in a checkout (editable installs use it as is) and
# a copy of its .spv files in a wheel (pyproject.toml's package-data).
DEFAULT_SHADER_DIR = Path(str(resources.files(__package__) / "shaders"))


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
