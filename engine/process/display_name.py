"""The name a person sees for a model, built from its GGUF metadata.

`general.name` is often a converter's title-casing of an internal run label ("Smollm2 135M 8k
Lc100K Mix1 Ep2"). The published file name usually says it better ("SmolLM2-135M-Instruct"):
it is used when it starts with the model's `general.basename`; else basename, size label and
fine-tune are joined; else `general.name` is kept. The quantization (`general.file_type`)
follows a dot: "SmolLM2 135M Instruct · Q4_1".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from gguf import GGUFReader, LlamaFileType

SEPARATORS = re.compile(r"[-_ ]+")


def _field(reader: GGUFReader, key: str):
    field = reader.fields.get(key)
    if field is None:
        return None
    try:
        return field.contents()
    except (ValueError, IndexError, TypeError):
        return None


def quant_label(file_type: object) -> str | None:
    """'Q4_1' for general.file_type 3; None when absent or unknown."""
    if not isinstance(file_type, int):
        return None
    try:
        name = LlamaFileType(file_type).name
    except ValueError:
        return None
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def display_name(path: Path, metadata: dict[str, object] | None = None) -> str:
    """The display name of the GGUF at `path` (`metadata`: its general.* fields, when the
    caller has them already; read from the file otherwise)."""
    if metadata is None:
        reader = GGUFReader(path)
        metadata = {key: _field(reader, key) for key in (
            "general.name", "general.basename", "general.size_label", "general.finetune",
            "general.file_type")}
    quant = quant_label(metadata.get("general.file_type"))
    base = _text(metadata.get("general.basename"))
    words = _file_words(Path(path).name, quant)
    if base and words and words[0].lower() == base.replace(" ", "-").lower():
        name = " ".join(words)
    elif base:
        name = " ".join(p for p in (base, _text(metadata.get("general.size_label")),
                                    _text(metadata.get("general.finetune"))) if p)
    else:
        name = _text(metadata.get("general.name")) or Path(path).stem
    return f"{name} · {quant}" if quant else name


def cached_display_name(path: Path, fingerprint: str, cache_dir: Path, fallback: str) -> str:
    """display_name, kept per model fingerprint in `cache_dir`: reading the metadata parses
    the whole GGUF header (seconds for a large vocabulary), so it is done once per model."""
    cache = Path(cache_dir) / "names" / f"{fingerprint}.json"
    try:
        cached = json.loads(cache.read_text(encoding="utf-8"))
        if isinstance(cached, dict) and isinstance(cached.get("display_name"), str):
            return cached["display_name"]
    except (OSError, ValueError):
        pass
    try:
        name = display_name(path)
    except Exception:  # odd metadata must not stop the engine: keep the plain name
        return fallback
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(cache.name + ".tmp")
        tmp.write_text(json.dumps({"display_name": name}), encoding="utf-8")
        tmp.replace(cache)
    except OSError:
        pass  # an unwritable cache only means reading the header again next time
    return name


def _file_words(filename: str, quant: str | None) -> list[str]:
    stem = filename.removesuffix(".gguf")
    if quant and stem.lower().endswith(quant.lower()):
        stem = stem[: -len(quant)].rstrip("-_.")
    return [w for w in SEPARATORS.split(stem) if w]


def _text(value: object) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None
