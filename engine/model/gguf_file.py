"""Opening a GGUF model file: every way it can be unusable becomes one named, one-line error."""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash
from gguf import GGUFReader, ReaderTensor

from ..errors import (
    MissingTensorError,
    ModelNotFoundError,
    NotGGUFError,
    TruncatedModelError,
    UnsupportedArchitectureError,
    UnsupportedTensorTypeError,
)
from .architecture import (
    ARCHITECTURES,
    CONV,
    DELTA,
    WINDOW,
    layer_kv_heads,
    metadata_layer_kinds,
    trunk_layers,
)
from .config import ModelConfig
from .gguf_extent import truncation_problem
from .gguf_header import GGUFHeaderError, read_header
from .support import support_problem
from .tensor_types import tensor_type_problem, type_names

GGUF_MAGIC = b"GGUF"



@dataclass(frozen=True)
class ModelFile:
    """A validated GGUF: its geometry, its tensors by name, and a content fingerprint."""

    path: Path
    reader: GGUFReader
    config: ModelConfig
    tensors: dict[str, ReaderTensor]
    fingerprint: str  # xxh3-128 of the whole file, hex
    name: str

    def tensor(self, name: str) -> ReaderTensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise MissingTensorError(f"model is missing tensor {name!r}: {self.path}") from None

    def field(self, key: str, default=None):
        field = self.reader.fields.get(key)
        return default if field is None else field.contents()


def fingerprint_file(path: Path) -> str:
    """xxh3-128 over the file's bytes: ~10 ms for the 98 MB default model."""
    with open(path, "rb") as f:
        return fingerprint_fd(f.fileno())


def fingerprint_fd(fd: int) -> str:
    """fingerprint_file of an open file."""
    if os.fstat(fd).st_size == 0:  # mmap refuses an empty file; its hash is b""'s
        return xxhash.xxh3_128_hexdigest(b"")
    with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as m:
        return xxhash.xxh3_128_hexdigest(m)


def open_model(path: str | os.PathLike) -> ModelFile:
    """Open and validate a GGUF of a supported architecture, or raise a ModelError naming
    the problem."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ModelNotFoundError(f"model file not found: {path}")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise NotGGUFError(f"not a GGUF file (starts with {magic!r}, expected b'GGUF'): {path}")
    _check_not_truncated(path)
    try:
        reader = GGUFReader(path, "r")
    except Exception as exc:  # gguf-py raises plain ValueError/struct errors on corrupt files
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise NotGGUFError(f"corrupt GGUF file ({reason}): {path}") from None
    fields = reader.fields

    def get(key: str, default=None):
        field = fields.get(key)
        return default if field is None else field.contents()

    tensors = {t.name: t for t in reader.tensors}
    problem = support_problem(get, tensors)
    if problem is not None:
        raise UnsupportedArchitectureError(f"{problem}: {path}")
    for t in reader.tensors:
        if problem := tensor_type_problem(t.name, int(t.tensor_type), listing=True):
            raise UnsupportedTensorTypeError(f"{problem}: {path}")
    try:
        config = _config_from_metadata(get, tensors, path)
    except (TypeError, ValueError) as exc:  # a string where a count belongs, and the like
        raise UnsupportedArchitectureError(
            f"model metadata has a value of the wrong type ({exc}): {path}") from None
    return ModelFile(
        path=path,
        reader=reader,
        config=config,
        tensors=tensors,
        fingerprint=fingerprint_file(path),
        name=str(get("general.name", path.stem)),
    )


def _check_not_truncated(path: Path) -> None:
    """Raise TruncatedModelError when the file is shorter than its tensor table says (gguf-py
    would fail on it with "cannot reshape array ..."). A header that does not read is left
    to GGUFReader, whose error open_model reports."""
    try:
        header = read_header(path)
    except GGUFHeaderError:
        return
    problem = truncation_problem(header, os.stat(path).st_size)
    if problem is not None:
        raise TruncatedModelError(f"model {problem}: {path}")


def _config_from_metadata(get, tensors: dict[str, ReaderTensor], path: Path) -> ModelConfig:
    arch = str(get("general.architecture"))

    def need(key: str):
        value = get(f"{arch}.{key}")
        if value is None:
            raise UnsupportedArchitectureError(f"model metadata lacks '{arch}.{key}': {path}")
        return value

    def opt(key: str, default):
        value = get(f"{arch}.{key}")
        return default if value is None else value

    n_heads = int(need("attention.head_count"))
    d_model = int(need("embedding_length"))
    vocab_size = int(opt("vocab_size", 0)) or int(tensors["token_embd.weight"].shape[1])
    # key_length: Qwen3 and Mistral Nemo have heads wider than d_model / n_heads.
    head_dim = int(opt("attention.key_length", d_model // max(n_heads, 1)))
    value_dim = int(opt("attention.value_length", head_dim))
    rope_dim = int(opt("rope.dimension_count", head_dim))
    partial = ARCHITECTURES[arch].partial_rotary and 0 < rope_dim < head_dim and rope_dim % 2 == 0
    if value_dim != head_dim or (rope_dim != head_dim and not partial):
        raise UnsupportedArchitectureError(
            f"{arch}: heads with key {head_dim}, value {value_dim} and rotary {rope_dim} "
            f"dimensions (partial rotary or unequal K/V heads) are not implemented: {path}")
    factor = float(opt("rope.scaling.factor", 0.0))
    linear = opt("rope.scaling.type", "linear") == "linear" and factor not in (0.0, 1.0)
    need("block_count")
    n_layers = trunk_layers(get)  # blocks past it (Qwen3.5's MTP) are not run
    window = int(opt("attention.sliding_window", 0))
    # Where the architecture runs its window as WINDOW layers, the ring is not capped by it.
    kinds = metadata_layer_kinds(get, n_layers)
    delta = DELTA in kinds
    # LFM2 gives one K/V head count per layer, 0 for its conv layers (support_problem has
    # checked that the attention layers' agree).
    kv_heads = [n for n in layer_kv_heads(get, n_layers) if n] or [n_heads]
    factors = ()
    if "rope_freqs.weight" in tensors:
        factors = tuple(float(x) for x in np.asarray(tensors["rope_freqs.weight"].data,
                                                     np.float32))
    config = ModelConfig(
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=int(kv_heads[0]),
        head_dim=head_dim,
        ffn_dim=int(need("feed_forward_length")),
        vocab_size=vocab_size,
        context_length=int(opt("context_length", 2048)),
        rope_theta=float(opt("rope.freq_base", 10000.0)),
        rms_eps=float(np.float32(opt("attention.layer_norm_rms_epsilon", 1e-5))),
        tied_embeddings="output.weight" not in tensors,
        architecture=arch,
        rope_freq_scale=1.0 / factor if linear else 1.0,
        rope_freq_factors=factors,
        # Rebase keeps the ring's positions within its length, so a ring no longer than the
        # window is exact. A window the architecture ignores (phi3's) is not recorded.
        sliding_window=0 if ARCHITECTURES[arch].ignores_sliding_window or kinds else window,
        layer_kinds=kinds,
        window=window if WINDOW in kinds else 0,
        conv_kernel=int(need("shortconv.l_cache")) if CONV in kinds else
        int(need("ssm.conv_kernel")) if delta else 0,
        rope_theta_window=ARCHITECTURES[arch].swa_rope_base if WINDOW in kinds else 0.0,
        rope_dim=rope_dim if partial else 0,
        delta_k_heads=int(need("ssm.group_count")) if delta else 0,
        delta_v_heads=int(need("ssm.time_step_rank")) if delta else 0,
        delta_head_dim=int(need("ssm.state_size")) if delta else 0,
        tensor_types=type_names(int(t.tensor_type) for t in tensors.values()),
    )
    if n_heads <= 0 or config.n_kv_heads <= 0 or config.n_heads % config.n_kv_heads:
        raise UnsupportedArchitectureError(
            f"unsupported head geometry ({n_heads} heads, {config.n_kv_heads} kv heads): {path}")
    if config.head_dim % 2:
        raise UnsupportedArchitectureError(f"RoPE needs an even head_dim, got {head_dim}: {path}")
    if factors and len(factors) != head_dim // 2:
        raise UnsupportedArchitectureError(
            f"rope_freqs has {len(factors)} factors, expected {head_dim // 2}: {path}")
    return config
