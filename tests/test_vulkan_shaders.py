"""The committed SPIR-V is what users run: it must exist for every shader and match a fresh
compile of the GLSL wherever glslc is installed (it is in CI)."""

from __future__ import annotations

import pytest

from engine.backends.vulkan.compile import compile_all, glslc, sources
from engine.backends.vulkan.pipelines import SHADER_DIR, SHADERS


def test_every_shader_has_source_and_binary() -> None:
    assert {p.stem for p in sources()} == set(SHADERS)
    for name in SHADERS:
        spv = SHADER_DIR / f"{name}.spv"
        assert spv.is_file(), f"{spv} missing: run `make shaders`"
        assert spv.read_bytes()[:4] == b"\x03\x02\x23\x07", f"{spv} is not SPIR-V"


@pytest.mark.skipif(glslc() is None, reason="glslc not installed")
def test_committed_binaries_are_not_stale(tmp_path) -> None:
    for fresh in compile_all(tmp_path):
        committed = SHADER_DIR / fresh.name
        assert committed.read_bytes() == fresh.read_bytes(), (
            f"{committed} is stale: run `make shaders` and commit the .spv files")
