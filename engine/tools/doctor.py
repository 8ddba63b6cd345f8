"""`channel doctor`: what Channel finds on this machine, for a bug report or a first run.

Backends (and why one cannot run), the Vulkan device, the model, the data and cache
directories with their free disk. Nothing is loaded beyond what those questions need.
"""

from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path

from ..model.catalog_table import size


def _dir(path: Path) -> dict:
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    free = shutil.disk_usage(existing).free if existing is not None else None
    return {"path": str(path), "exists": path.is_dir(), "free_bytes": free,
            "writable": existing is not None and os.access(existing, os.W_OK)}


def _model(model: Path | None) -> dict:
    """The model's catalog entry (header only: milliseconds), with whether it can run."""
    from ..backends import problems_running
    from ..errors import ChannelError
    from ..model.catalog import describe
    from ..model.catalog_sources import Found
    from ..paths import default_model_path

    try:
        path = Path(model) if model else default_model_path()
    except ChannelError as exc:
        return {"problem": str(exc)}
    if not path.is_file():
        return {"path": str(path), "problem": "no such file"}
    entry = describe(Found("given", path))
    return {"path": str(path), "bytes": entry.file_size, "name": entry.name,
            "architecture": entry.architecture, "parameters": entry.parameters,
            "supported": entry.supported, "problem": entry.problem, "layers": entry.layers,
            "backends": ({} if entry.problem else
                         problems_running(entry.features, entry.architecture or "?"))}


def _backends() -> dict:
    from ..backends.ggml.lib import available as ggml_problem
    from ..backends.vulkan.context import probe

    vulkan = probe()
    return {
        "numpy": {"available": True},
        "ggml": {"available": ggml_problem() is None, "problem": ggml_problem()},
        "vulkan": ({"available": False, "problem": vulkan} if isinstance(vulkan, str)
                   else {"available": True, "device": vulkan.as_dict()}),
    }


def diagnose(model: Path | None, data_dir: Path, cache_dir: Path) -> dict:
    backends = _backends()
    auto = ("vulkan" if backends["vulkan"].get("device", {}).get("type", "").endswith("gpu")
            else "ggml" if backends["ggml"]["available"] else "numpy")
    return {
        "backends": backends, "auto": auto, "model": _model(model),
        "data_dir": _dir(Path(data_dir)), "cache_dir": _dir(Path(cache_dir)),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpu_count": os.cpu_count()},
    }


def _size(n: int | None) -> str:
    return "?" if n is None else size(n)  # the catalog's units: `channel models` agrees


def render(report: dict) -> str:
    lines = ["Backends:"]
    for name, info in report["backends"].items():
        if info["available"]:
            device = info.get("device")
            extra = f" ({device['name']}, {device['type']})" if device else ""
            lines.append(f"  {name:<7} available{extra}")
        else:
            lines.append(f"  {name:<7} unavailable: {info['problem']}")
    lines.append(f"  --backend auto picks {report['auto']}")
    model = report["model"]
    if model.get("problem"):
        lines.append(f"Model: {model.get('path', '?')}: {model['problem']}")
    else:
        lines.append(f"Model: {model['name']} ({_size(model['bytes'])}) at {model['path']}")
        if model.get("layers"):
            lines.append(f"  layers: {model['layers']}")
        lines += [f"  not on {name}: {why}" for name, why in model["backends"].items() if why]
    for key, label in (("data_dir", "Data"), ("cache_dir", "Cache")):
        d = report[key]
        state = "" if d["exists"] else " (not created yet)"
        lines.append(f"{label} directory: {d['path']}{state} · {_size(d['free_bytes'])} free"
                     + ("" if d["writable"] else " · NOT writable"))
    m = report["machine"]
    lines.append(f"Machine: {m['platform']} · Python {m['python']} · {m['cpu_count']} CPUs")
    return "\n".join(lines)
