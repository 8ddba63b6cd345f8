"""`--backend auto|ggml|numpy|vulkan`: which backend a process uses, and why.

`auto` takes Vulkan on a GPU (and on a CPU Vulkan device such as lavapipe only where a recorded
measurement on this device and model says it decodes faster: vulkan/measurements.py keeps them),
else ggml, the quantized CPU default, else numpy, the exact f32 reference. Picking the CPU is
the normal case and says nothing. The one fallback worth a word is numpy for want of ggml (its
bindings need a C compiler to install): that note is given once per cache directory. A backend
asked for by name that cannot run raises its named error (GgmlUnavailableError,
VulkanUnavailableError) with what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..model.architecture import backend_problem
from ..model.config import ModelConfig
from ..state.ring_policy import DEFAULT_EVICT, RingPolicy
from . import BACKEND_CHOICES
from .base import Backend, model_problem
from .ggml import FEATURES as GGML_FEATURES
from .ggml.lib import available as ggml_problem
from .numpy.backend import NumpyBackend
from .vulkan.context import probe
from .vulkan.loader import DeviceInfo, VulkanUnavailableError
from .vulkan.measurements import measured_faster
from .vulkan.options import current

CHOICES = BACKEND_CHOICES
NUMPY_NOTE_MARKER = "numpy-fallback-noted"


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
    if requested == "ggml":
        from .ggml.backend import GgmlBackend  # noqa: PLC0415 - needs the ggml bindings

        return Choice(GgmlBackend(), None)
    if requested == "vulkan":
        from .vulkan.backend import VulkanBackend  # noqa: PLC0415 - needs the vulkan package

        return Choice(VulkanBackend(), None)
    vulkan = _auto_vulkan(cache_dir, model_fingerprint)
    if vulkan is not None:
        return Choice(vulkan, None)
    return _cpu_choice(cache_dir)


def fit_to_model(choice: Choice, requested: str, cfg: ModelConfig,
                 cache_dir: Path | None = None) -> Choice:
    """`auto` never keeps a backend that cannot run the loaded model (the Vulkan shaders
    implement the llama family only, and read five tensor types): the model runs on the
    first CPU backend that implements it."""
    if requested != "auto" or model_problem(choice.backend, cfg) is None:
        return choice
    return _cpu_choice(cache_dir, cfg)


@dataclass
class Placement:
    """Where each model a process loads runs, and its ring: the process's backend,
    --ring-slots and --evict, fitted per model. `auto` leaves a GPU backend that lacks a
    model's architecture (one backend of each kind is made for all such models), and an
    asked-for ring never exceeds a model's trained context."""

    choice: Choice
    requested: str = "auto"
    cache_dir: Path | None = None
    ring_slots: int | None = None
    evict: str = DEFAULT_EVICT  # the rings' eviction policy (--evict)
    _fallbacks: dict[str, Choice] = field(default_factory=dict, repr=False)

    def backend(self, cfg: ModelConfig) -> Backend:
        fitted = fit_to_model(self.choice, self.requested, cfg, self.cache_dir)
        if fitted is self.choice:
            return self.choice.backend
        return self._fallbacks.setdefault(fitted.backend.name, fitted).backend

    def policy(self, cfg: ModelConfig) -> RingPolicy | None:
        """None lets the conversation size its ring to the model and its memory budget."""
        if self.ring_slots is None:
            if self.evict == DEFAULT_EVICT:
                return None
            item_bytes = self.backend(cfg).kv_format.slot_item_bytes  # the conversation's
            return RingPolicy.for_model(cfg, cfg.kv_bytes_per_slot(*item_bytes),
                                        evict=self.evict)
        longest = min(cfg.context_length, cfg.sliding_window or cfg.context_length)
        return RingPolicy.for_model(cfg, slots=min(self.ring_slots, longest), evict=self.evict)


def _cpu_choice(cache_dir: Path | None, cfg: ModelConfig | None = None) -> Choice:
    """ggml where it is built and implements `cfg`'s model, else numpy (which runs every
    model): a numpy forced by the model says so, each time."""
    problem = ggml_problem()
    if problem is None:
        lacks = None if cfg is None else backend_problem(
            cfg.features, cfg.architecture, "ggml", GGML_FEATURES)
        if lacks is None:
            from .ggml.backend import GgmlBackend  # noqa: PLC0415

            return Choice(GgmlBackend(), None)
        return Choice(NumpyBackend(), f"using the numpy reference backend: {lacks}")
    return Choice(NumpyBackend(), _numpy_note(problem, cache_dir))


def backend_for_model(requested: str, model: Path | None, cache_dir: Path) -> Choice:
    """choose_backend for the GGUF at `model` (default: the shipped one), keyed by its
    fingerprint so that `auto` can consult this device's recorded measurement."""
    if requested in ("numpy", "ggml"):
        return choose_backend(requested, cache_dir)
    from ..model.gguf_file import fingerprint_file  # noqa: PLC0415
    from ..paths import default_model_path  # noqa: PLC0415

    path = Path(model) if model else default_model_path()
    fingerprint = fingerprint_file(path) if path.is_file() else None
    return choose_backend(requested, cache_dir, fingerprint)


def _auto_vulkan(cache_dir: Path | None, fingerprint: str | None) -> Backend | None:
    """The Vulkan backend if `auto` should take it, else None (no loader or device is normal)."""
    info = probe()
    if isinstance(info, str):
        return None
    if not (info.is_gpu or _vulkan_on_cpu_device(info, cache_dir, fingerprint)):
        return None
    from .vulkan.backend import VulkanBackend  # noqa: PLC0415

    try:
        return VulkanBackend()
    except VulkanUnavailableError:
        return None


def _vulkan_on_cpu_device(info: DeviceInfo, cache_dir: Path | None,
                          fingerprint: str | None) -> bool:
    if current().allow_cpu_device:  # explicit opt-in for CPU devices
        return True
    cpu_default = "ggml" if ggml_problem() is None else "numpy"
    return measured_faster(info, cache_dir, fingerprint, cpu_default)


def _numpy_note(problem: str, cache_dir: Path | None) -> str | None:
    """Why decoding is slower than it could be: said the first time only."""
    marker = Path(cache_dir) / NUMPY_NOTE_MARKER if cache_dir is not None else None
    if marker is not None and marker.exists():
        return None
    if marker is not None:
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(problem + "\n")
        except OSError:
            pass  # an unwritable cache only means the note comes again next time
    return f"using the numpy reference backend, about 3x slower than ggml: {problem}"
