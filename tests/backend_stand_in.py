"""A GPU backend as `auto`'s choice (engine/backends/select.py's fit_to_model) reads one: its
name, the features it implements and the sizes it refuses, without a device."""

from __future__ import annotations

from collections.abc import Callable

from engine.model.config import ModelConfig


class GpuBackendStandIn:
    name = "vulkan"

    def __init__(self, features: frozenset[str],
                 refuses: Callable[[ModelConfig], str | None] = lambda cfg: None) -> None:
        self.features = features
        self._refuses = refuses

    def shape_problem(self, cfg: ModelConfig) -> str | None:
        return self._refuses(cfg)
