"""The loaded model: immutable weights, RoPE tables, tokenizer and chat template.

One Model serves every conversation in a process. Loading it is fast after the first time:
the GGUF is fingerprinted (~10 ms), and the cached weight image, which also carries the
tokenizer and template, is mapped read-only. Only on a cache miss is the GGUF parsed with
gguf-py and dequantized, with a progress callback.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .chat_template import ChatTemplate
from .config import ModelConfig
from .errors import NotGGUFError, WeightImageError
from .gguf_file import GGUF_MAGIC, ModelFile, fingerprint_file, open_model
from .paths import default_cache_dir, default_model_path
from .rope import RopeTables
from .tokenizer import Tokenizer
from .weights import WeightImage, Weights, build_image, map_image

Progress = Callable[[int, int], None]


@dataclass
class Model:
    path: Path
    fingerprint: str
    name: str
    config: ModelConfig
    weights: Weights
    rope: RopeTables
    tokenizer: Tokenizer
    template: ChatTemplate
    image: WeightImage
    timings: dict[str, float] = field(default_factory=dict)
    image_built: bool = False

    @property
    def dtype(self) -> str:
        return "float32"


def load_model(path: str | Path | None = None, cache_dir: str | Path | None = None,
               progress: Progress | None = None) -> Model:
    """Load a GGUF (default: the shipped SmolLM2) through the weight-image cache."""
    path = Path(path).expanduser() if path is not None else default_model_path()
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    if not path.is_file():
        open_model(path)  # raises the named not-found error
    with open(path, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            open_model(path)  # raises the named not-a-GGUF error
    fingerprint = fingerprint_file(path)
    timings["fingerprint_s"] = time.perf_counter() - t0
    image_path = cache_dir / "weights" / f"{fingerprint}.f32.chwi"

    built = False
    try:
        t0 = time.perf_counter()
        image = map_image(image_path, fingerprint)
    except WeightImageError:
        t0 = time.perf_counter()
        model_file = open_model(path)
        if model_file.fingerprint != fingerprint:
            raise NotGGUFError(f"model file changed while loading: {path}") from None
        build_image(model_file, image_path, _extras(model_file), progress)
        timings["image_build_s"] = time.perf_counter() - t0
        built = True
        t0 = time.perf_counter()
        image = map_image(image_path, fingerprint)
    timings["image_map_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    extras = image.extras
    tokenizer = Tokenizer.from_json(extras["tokenizer"])
    template = ChatTemplate(extras["chat_template"], extras["bos_token"], extras["eos_token"])
    timings["tokenizer_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    rope = RopeTables(image.config)
    timings["rope_s"] = time.perf_counter() - t0
    return Model(
        path=path,
        fingerprint=fingerprint,
        name=extras.get("name", path.stem),
        config=image.config,
        weights=image.weights,
        rope=rope,
        tokenizer=tokenizer,
        template=template,
        image=image,
        timings=timings,
        image_built=built,
    )


def _extras(model_file: ModelFile) -> dict:
    """What besides weights a later start needs, so that it never re-parses the GGUF."""
    tokenizer = Tokenizer.from_gguf(model_file.reader)
    template = ChatTemplate.from_gguf(model_file.reader)
    return {
        "name": model_file.name,
        "tokenizer": tokenizer.to_json(),
        "chat_template": template.source,
        "bos_token": template.bos_token,
        "eos_token": template.eos_token,
    }
