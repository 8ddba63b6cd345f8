"""The loaded model: weights, RoPE, tokenizer and chat template, shared by conversations.

Loading is fast after the first time. The GGUF is fingerprinted (~10 ms) and two cache files
keyed by that fingerprint are used:
- `<fp>.meta.json`: geometry, tokenizer, chat template and the GGUF's tensor table, so no later
  start parses the GGUF's 49k-entry vocabulary with gguf-py (several seconds);
- `<fp>.f32.chwi`: the numpy backend's dequantized weight image, mapped read-only.
A backend that reads quantized blocks straight from the GGUF (Vulkan) skips the image.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import NotGGUFError, WeightImageError
from ..fileio import write_atomically
from ..paths import default_cache_dir, default_model_path
from .architecture import WINDOW
from .chat_template import ChatTemplate
from .config import ModelConfig
from .display_name import display_name, quant_label
from .gguf_file import GGUF_MAGIC, ModelFile, fingerprint_file, open_model
from .model_files import FileIdentity, ModelFiles
from .rope import Rope, window_rope_config
from .tokenizer import Tokenizer
from .weights import Weights, build_image, map_image

Progress = Callable[[int, int], None]
# 2: architecture fields in the config; 3: the tokenizer's add_bos and EOG set; 4: `name` is
# the display name (display_name.py), not general.name; 5: the config's sliding_window;
# 6: the recommended sampling (general.sampling.*); 7: the config's tensor_types (a backend
# that cannot read one of them is refused: an older record, without them, would ask nothing).
META_VERSION = 7
SAMPLING_PREFIX = "general.sampling."


@dataclass(frozen=True)
class TensorInfo:
    """Where a tensor's raw (possibly quantized) bytes sit in the GGUF file."""

    ggml_type: int
    shape: tuple[int, ...]  # GGUF order: fastest-varying dimension first
    offset: int  # absolute byte offset in the file
    nbytes: int


@dataclass
class Model:
    path: Path
    fingerprint: str
    name: str
    config: ModelConfig
    rope: Rope
    tokenizer: Tokenizer
    template: ChatTemplate
    tensors: dict[str, TensorInfo]
    weights: Weights | None  # the f32 image; None when the backend does not need it
    timings: dict[str, float] = field(default_factory=dict)
    image_built: bool = False
    # The WINDOW layers' RoPE where the model has such layers (model/rope.py).
    rope_window: Rope | None = None
    # The GGUF as loaded and the mappings the weights are read through (model_files.py).
    files: ModelFiles | None = None
    # The publisher's recommended sampling, `general.sampling.<suffix>` numbers by suffix
    # (state/sampling_defaults.py turns them into a reply's defaults).
    recommended_sampling: dict[str, int | float] = field(default_factory=dict)

    def check_files(self) -> list[str]:
        """Before a turn: raise ModelFileChangedError if a file the weights are mapped from
        was truncated or rewritten in place (reading it could kill the process); returns a
        warning, once, when the GGUF was replaced on disk and the engine keeps the old one."""
        return self.files.check() if self.files is not None else []

    def guard_files(self) -> None:
        """Before a forward pass: raise ModelFileChangedError if a mapped file shrank."""
        if self.files is not None:
            self.files.guard()


def checked_model_path(path: str | Path | None = None) -> Path:
    """The GGUF at `path` (default: the shipped SmolLM2), checked to be a file that starts
    with GGUF's magic: the cheap checks, which raise the named one-line errors before any
    other work (a backend's choice, its notes) is done for a file that cannot load."""
    path = Path(path).expanduser() if path is not None else default_model_path()
    if not path.is_file():
        open_model(path)  # raises the named not-found error
    with open(path, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            open_model(path)  # raises the named not-a-GGUF error
    return path


def load_model(path: str | Path | None = None, cache_dir: str | Path | None = None,
               progress: Progress | None = None, f32_weights: bool = True) -> Model:
    """Load a GGUF (default: the shipped SmolLM2) through the cache."""
    cache = (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / "weights"
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    path = checked_model_path(path)
    # Taken before the fingerprint: a change while it is computed shows as a change later.
    identity = FileIdentity.of(path.stat())
    fingerprint = fingerprint_file(path)
    files = ModelFiles(path, identity, fingerprint)
    timings["fingerprint_s"] = time.perf_counter() - t0

    parsed: ModelFile | None = None

    def parse() -> ModelFile:
        nonlocal parsed
        if parsed is None:
            parsed = open_model(path)
            if parsed.fingerprint != fingerprint:
                raise NotGGUFError(f"model file changed while loading: {path}")
        return parsed

    t0 = time.perf_counter()
    meta_path = cache / f"{fingerprint}.meta.json"
    meta = _read_meta(meta_path, fingerprint)
    if meta is None:
        meta = _build_meta(parse())
        write_atomically(meta_path, json.dumps(meta).encode())
    config = ModelConfig.from_dict(meta["config"])
    tokenizer = Tokenizer.from_json(meta["tokenizer"])
    template = ChatTemplate(meta["chat_template"], meta["bos_token"], meta["eos_token"])
    tensors = {k: TensorInfo(v[0], tuple(v[1]), v[2], v[3]) for k, v in meta["tensors"].items()}
    timings["meta_s"] = time.perf_counter() - t0

    weights, built = None, False
    if f32_weights:
        image_path = cache / f"{fingerprint}.f32.chwi"
        t0 = time.perf_counter()
        try:
            image = map_image(image_path, fingerprint)
        except WeightImageError:
            t0 = time.perf_counter()
            build_image(parse(), image_path, progress)
            timings["image_build_s"] = time.perf_counter() - t0
            built = True
            t0 = time.perf_counter()
            image = map_image(image_path, fingerprint)
        timings["image_map_s"] = time.perf_counter() - t0
        weights = image.weights
        files.watch_mapping(image.mapping, image.path, "weight image",
                            "restart Channel to rebuild it from the GGUF")

    t0 = time.perf_counter()
    rope = Rope(config)
    rope_window = Rope(window_rope_config(config)) if WINDOW in config.kinds else None
    timings["rope_s"] = time.perf_counter() - t0
    return Model(path, fingerprint, meta["name"], config, rope, tokenizer, template, tensors,
                 weights, timings, built, rope_window, files, meta["sampling"])


def _build_meta(model_file: ModelFile) -> dict:
    template = ChatTemplate.from_gguf(model_file.reader)
    return {
        "version": META_VERSION,
        "fingerprint": model_file.fingerprint,
        "name": display_name(model_file.path, model_file.field,
                             quant_label(model_file.field("general.file_type"))),
        "config": asdict(model_file.config),
        "tokenizer": Tokenizer.from_gguf(model_file.reader).to_json(),
        "chat_template": template.source,
        "bos_token": template.bos_token,
        "eos_token": template.eos_token,
        "sampling": recommended_sampling(model_file),
        "tensors": {
            t.name: [int(t.tensor_type), [int(x) for x in t.shape], int(t.data_offset),
                     int(t.n_bytes)]
            for t in model_file.reader.tensors
        },
    }


def recommended_sampling(model_file: ModelFile) -> dict[str, int | float]:
    """The GGUF's `general.sampling.*` numbers, by key suffix (strings such as `sequence`,
    and anything not a finite number, are left out)."""
    found = {}
    for key in model_file.reader.fields:
        if key.startswith(SAMPLING_PREFIX):
            value = model_file.field(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) \
                    and math.isfinite(value):
                found[key[len(SAMPLING_PREFIX):]] = value
    return found


def _read_meta(path: Path, fingerprint: str) -> dict | None:
    """The cached metadata, or None if missing, unreadable or for another file (rebuilt)."""
    try:
        meta = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    ok = (
        isinstance(meta, dict)
        and meta.get("version") == META_VERSION
        and meta.get("fingerprint") == fingerprint
        and {"config", "tokenizer", "chat_template", "tensors", "sampling"} <= meta.keys()
    )
    return meta if ok else None
