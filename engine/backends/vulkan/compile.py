"""Compiling shaders/*.comp to SPIR-V with glslc:
`python -m engine.backends.vulkan.compile [OUT_DIR]`.

The committed .spv files are what users run (no compiler needed); `make shaders` calls this,
and a test recompiles into a temporary folder to catch binaries that are stale. It works in a
checkout: the package's shaders/ link resolves to the repository's shaders/ folder, which holds
the GLSL and receives the SPIR-V (a wheel ships only the .spv files).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from .pipelines import SHADER_DIR as PACKAGED_SHADERS

SHADER_DIR = PACKAGED_SHADERS.resolve()  # the repository's shaders/ folder in a checkout

GLSLC_FLAGS = ("--target-env=vulkan1.1", "-O")


def glslc() -> str | None:
    return shutil.which("glslc")


def sources(shader_dir: Path = SHADER_DIR) -> list[Path]:
    return sorted(shader_dir.glob("*.comp"))


def compile_all(out_dir: Path, shader_dir: Path = SHADER_DIR) -> list[Path]:
    """Compile every .comp into out_dir/NAME.spv; raises CalledProcessError on a GLSL error."""
    exe = glslc()
    if exe is None:
        raise FileNotFoundError("glslc not found (Debian: apt-get install glslc)")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for src in sources(shader_dir):
        dest = out_dir / f"{src.stem}.spv"
        subprocess.run([exe, *GLSLC_FLAGS, "-I", str(shader_dir), "-o", str(dest), str(src)],
                       check=True)
        written.append(dest)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else SHADER_DIR
    for path in compile_all(out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
