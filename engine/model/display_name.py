"""The name a person sees for a model, built from its GGUF metadata.

`general.name` is often a converter's title-casing of an internal run label ("Smollm2 135M 8k
Lc100K Mix1 Ep2"). The published file name usually says it better ("SmolLM2-135M-Instruct"):
it is used when it starts with the model's `general.basename`; else basename, size label and
fine-tune are joined; else `general.name` is kept; else the file's stem. The quantization
follows a dot: "SmolLM2 135M Instruct · Q4_1".

Both the loaded model (engine/model/model.py, once per model: the name is cached with its
metadata) and the catalog's header scan (engine/model/catalog.py) name models here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from gguf import LlamaFileType

SEPARATORS = re.compile(r"[-_ ]+")
Metadata = Callable[[str], object]  # key -> value or None


def quant_label(file_type: object) -> str | None:
    """'Q4_1' for general.file_type 3; None when absent, unknown or only guessed."""
    if not isinstance(file_type, int):
        return None
    try:
        name = LlamaFileType(file_type).name
    except ValueError:
        return None
    if name == "GUESSED":
        return None
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def display_name(path: Path, get: Metadata, quant: str | None) -> str:
    """The display name of the GGUF at `path` whose metadata `get` reads."""
    base = _text(get("general.basename"))
    words = _file_words(Path(path).name, quant)
    if base and words and words[0].lower() == base.replace(" ", "-").lower():
        name = " ".join(words)
    elif base:
        name = " ".join(p for p in (base, _text(get("general.size_label")),
                                    _text(get("general.finetune"))) if p)
    else:
        name = _text(get("general.name")) or _stem(Path(path))
    return f"{name} · {quant}" if quant else name


def _stem(path: Path) -> str:
    return path.stem if path.suffix.lower() == ".gguf" else path.name


def _file_words(filename: str, quant: str | None) -> list[str]:
    stem = filename.removesuffix(".gguf")
    if quant and stem.lower().endswith(quant.lower()):
        stem = stem[: -len(quant)].rstrip("-_.")
    return [w for w in SEPARATORS.split(stem) if w]


def _text(value: object) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None
