"""The command line on a machine without a Vulkan loader, simulated: in these subprocesses
`import vulkan` fails exactly as the package does when it cannot dlopen libvulkan.so.1
(OSError). `auto` then takes the CPU and says nothing; `channel doctor` says why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from engine.backends.ggml.lib import available as ggml_available
from engine.backends.select import NUMPY_NOTE_MARKER

REPO = Path(__file__).resolve().parent.parent
# A meta-path finder that makes `import vulkan` raise what the real package raises without
# its loader, then runs channel_cli.cli with the given arguments.
NO_LOADER = """
import importlib.abc, importlib.machinery, sys
class NoLoader(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name == "vulkan" or name.startswith("vulkan."):
            return importlib.machinery.ModuleSpec(name, self)
    def create_module(self, spec):
        raise OSError("libvulkan.so.1: cannot open shared object file: No such file")
    def exec_module(self, module):
        pass
sys.meta_path.insert(0, NoLoader())
sys.modules.pop("vulkan", None)
from channel_cli.cli import main
sys.exit(main(sys.argv[1:]))
"""


def channel(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NO_LOADER, *args], capture_output=True,
                          text=True, cwd=REPO, timeout=300)


def test_auto_on_a_machine_without_vulkan_says_nothing(tmp_path, tiny_gguf, tiny_cache) -> None:
    """Nothing about Vulkan: the boot line alone, after, where ggml could not be built (a
    machine without a C compiler), the one note that names the numpy fallback, which is said
    the first time a cache directory is used only."""
    fallback_note = ggml_available() is not None and not (tiny_cache / NUMPY_NOTE_MARKER).exists()
    proc = channel("chat", "--model", str(tiny_gguf), "--cache-dir", str(tiny_cache),
                   "--data-dir", str(tmp_path), "--max-tokens", "3", "hi")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    if fallback_note:
        note = lines.pop(0)
        assert note.startswith("channel: note: using the numpy reference backend") and \
            "ggml" in note and "vulkan" not in note.lower(), note
    assert len(lines) == 1 and lines[0].startswith("Cold boot · a new conversation"), lines


def test_a_bad_model_is_still_one_line_without_vulkan(tmp_path) -> None:
    proc = channel("chat", "--model", str(tmp_path / "missing.gguf"), "--data-dir",
                   str(tmp_path), "hi")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("channel: error:"), lines


def test_doctor_names_the_missing_loader(tmp_path, tiny_gguf, tiny_cache) -> None:
    proc = channel("doctor", "--model", str(tiny_gguf), "--cache-dir", str(tiny_cache),
                   "--data-dir", str(tmp_path / "data"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "vulkan  unavailable: no Vulkan loader (libvulkan.so.1)" in out
    assert "numpy   available" in out and "Model: tiny-test-llama" in out
    assert "Data directory:" in out and "free" in out
