"""`--backend auto|ggml|numpy|vulkan`: what auto picks, and the one-line reasons when not."""

from __future__ import annotations

import pytest

from engine.backends import select as sel
from engine.backends.numpy.backend import NumpyBackend
from engine.backends.vulkan import VulkanUnavailableError, loader, options, probe
from engine.backends.vulkan.measurements import record_measurement
from engine.backends.vulkan.options import VulkanOptions


def test_numpy_is_always_available() -> None:
    choice = sel.choose_backend("numpy")
    assert isinstance(choice.backend, NumpyBackend) and choice.note is None


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown backend"):
        sel.choose_backend("cuda")


def test_auto_without_vulkan_takes_the_cpu_silently(monkeypatch) -> None:
    monkeypatch.setattr(sel, "probe", lambda: "no Vulkan loader (libvulkan.so.1) on this machine")
    choice = sel.choose_backend("auto")
    assert choice.backend.name == ("ggml" if sel.ggml_problem() is None else "numpy")
    assert choice.note is None or "ggml" in choice.note


def test_auto_without_ggml_says_why_once(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(sel, "probe", lambda: "no Vulkan loader (libvulkan.so.1) on this machine")
    monkeypatch.setattr(sel, "ggml_problem", lambda: "the ggml bindings are not installed (x)")
    first = sel.choose_backend("auto", tmp_path)
    assert isinstance(first.backend, NumpyBackend)
    assert "numpy" in first.note and "not installed" in first.note and "\n" not in first.note
    assert sel.choose_backend("auto", tmp_path).note is None  # said once per cache directory


def test_ggml_asked_for_but_missing_is_a_named_error(monkeypatch) -> None:
    from engine.backends.ggml import lib

    def missing():
        raise lib.GgmlUnavailableError("the ggml bindings are not installed (pip install ...)")

    monkeypatch.setattr(lib, "_ggml", None)
    monkeypatch.setattr(lib, "ggml", missing)
    import engine.backends.ggml.backend as gb

    monkeypatch.setattr(gb, "ggml", missing)
    with pytest.raises(lib.GgmlUnavailableError, match="not installed"):
        sel.choose_backend("ggml")


def test_missing_package_and_loader_are_named(monkeypatch) -> None:
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "vulkan":
            raise OSError("cannot load libvulkan.so.1")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(loader, "_vk", None)
    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(VulkanUnavailableError, match="libvulkan"):
        loader.vk()


def test_vulkan_without_a_device_says_what_is_missing(monkeypatch) -> None:
    import engine.backends.vulkan.backend as vb

    def no_device():
        raise VulkanUnavailableError("Vulkan has no device: install mesa-vulkan-drivers")

    monkeypatch.setattr(vb, "get_context", no_device)
    with pytest.raises(VulkanUnavailableError, match="mesa-vulkan-drivers"):
        sel.choose_backend("vulkan")


def test_auto_on_a_cpu_device_follows_the_measurement(tmp_path, monkeypatch) -> None:
    info = probe()
    if isinstance(info, str):
        pytest.skip(info)
    if info.is_gpu:
        pytest.skip("a GPU is always taken")
    monkeypatch.setattr(options, "_current", VulkanOptions(allow_cpu_device=False))
    cpu_default = "ggml" if sel.ggml_problem() is None else "numpy"
    assert sel.choose_backend("auto", tmp_path, "fp").backend.name == cpu_default
    record_measurement(tmp_path, info, "fp", {"vulkan": 30.0, cpu_default: 20.0})
    assert sel.choose_backend("auto", tmp_path, "fp").backend.name == "vulkan"
    record_measurement(tmp_path, info, "fp", {"vulkan": 10.0, cpu_default: 20.0})
    assert sel.choose_backend("auto", tmp_path, "fp").backend.name == cpu_default
    # Faster than numpy says nothing about ggml: without ggml's speed, the CPU default stays.
    if cpu_default == "ggml":
        record_measurement(tmp_path, info, "fp", {"vulkan": 30.0, "numpy": 20.0})
        assert sel.choose_backend("auto", tmp_path, "fp").backend.name == "ggml"
