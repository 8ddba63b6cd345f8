"""What a snapshot must agree on with the engine that restores it: its identity JSON, and the
layer planes of hybrid models (docs/snapshot.md). format.py holds the binary layout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..model.rope import window_rope_config
from ..state.arena import LAYER_PLANES
from .format import KV_DTYPES, Sections, SnapshotCorruptError

if TYPE_CHECKING:
    from ..conversation import Conversation
    from ..model.config import ModelConfig


def identity_of(conv: Conversation) -> dict:
    """What a snapshot must agree on with the engine that restores it."""
    cfg, model = conv.model.config, conv.model
    return {
        "model_fingerprint": model.fingerprint,
        "model_name": model.name,
        "k_dtype": str(conv.arena.views().k_cache.dtype),
        "v_dtype": str(conv.arena.views().v_cache.dtype),
        "geometry": {
            "n_layers": cfg.n_layers, "d_model": cfg.d_model, "n_heads": cfg.n_heads,
            "n_kv_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim, "kv_dim": cfg.kv_dim,
            "context_length": cfg.context_length, "vocab_size": cfg.vocab_size,
        },
        "rope": rope_identity(cfg),
        "max_slots": conv.policy.max_slots,
        **layers_identity(conv),
    }


def layers_identity(conv: Conversation) -> dict:
    """A hybrid model's per-layer geometry and the planes its layers outside the ring keep
    (name, element type, shape). Absent for a model whose layers are all in the ring, so its
    identity is what it was before hybrids (and its older snapshots still restore)."""
    cfg = conv.model.config
    if not cfg.hybrid:
        return {}
    layers = {"kinds": list(cfg.kinds), "window": cfg.window, "conv_kernel": cfg.conv_kernel}
    if cfg.window:
        layers["rope_window"] = rope_identity(window_rope_config(cfg))
    v = conv.arena.views()
    planes = [{"name": name, "dtype": getattr(v, name).dtype.str,
               "shape": list(getattr(v, name).shape)} for name in conv.ring.planes]
    return {"layers": layers, "planes": planes}


@dataclass(frozen=True)
class PlaneSpec:
    """One layer plane as a snapshot's identity lists it."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return self.dtype.itemsize * int(np.prod(self.shape, dtype=np.int64))


def plane_specs(identity: dict, sections: Sections) -> tuple[PlaneSpec, ...]:
    """The planes a snapshot holds, checked to fill its planes section exactly."""
    listed = identity.get("planes", [])
    specs = []
    try:
        for entry in listed:
            dtype = np.dtype(entry["dtype"])
            shape = tuple(int(d) for d in entry["shape"])
            if entry["name"] not in LAYER_PLANES or dtype not in KV_DTYPES.values() or \
                    any(d < 0 for d in shape):
                raise ValueError(entry["name"])
            specs.append(PlaneSpec(entry["name"], dtype, shape))
    except (KeyError, TypeError, ValueError):
        raise SnapshotCorruptError("identity lists a layer plane it cannot describe") from None
    if sum(spec.nbytes for spec in specs) != sections.planes_bytes:
        raise SnapshotCorruptError(
            f"layer planes of {sum(s.nbytes for s in specs)} bytes listed, "
            f"{sections.planes_bytes} stored")
    return tuple(specs)


WINDOW_PLANES = ("kw_cache", "vw_cache")  # circular by clock; saved oldest first


def window_to_token_order(plane: np.ndarray, clock: int) -> np.ndarray:
    """A window plane (layers, window, kv_dim) with its rows oldest first: the circular row
    of the token stamped c is (c - 1) % window, so the oldest of the newest `window` tokens
    sits at row clock % window. A copy, so the cut does not change as decoding goes on."""
    return np.roll(plane, -(clock % plane.shape[1]), axis=1)


def window_from_token_order(rows: np.ndarray, clock: int, out: np.ndarray) -> None:
    """The inverse of window_to_token_order, into the arena's plane `out`."""
    shift = clock % out.shape[1]
    np.copyto(out[:, shift:], rows[:, : out.shape[1] - shift])
    np.copyto(out[:, :shift], rows[:, out.shape[1] - shift :])


def rope_identity(cfg: ModelConfig) -> dict:
    """How cached keys were rotated. Scaling keys appear only when a model has them, so a
    plain llama's identity is the same as before the architecture table existed."""
    rope = {"theta": cfg.rope_theta, "dim": cfg.head_dim, "layout": cfg.arch.rope_style}
    if cfg.rope_freq_scale != 1.0:
        rope["freq_scale"] = cfg.rope_freq_scale
    if cfg.rope_freq_factors:
        rope["freq_factors"] = list(cfg.rope_freq_factors)
    return rope


def identity_bytes(identity: dict) -> bytes:
    return json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()


def parse_identity(data: bytes | memoryview, sections: Sections) -> dict:
    raw = bytes(data[sections.identity : sections.identity + sections.identity_len])
    try:
        identity = json.loads(raw)
    except ValueError:
        raise SnapshotCorruptError("identity section is not valid JSON") from None
    if not isinstance(identity, dict):
        raise SnapshotCorruptError("identity section is not a JSON object")
    return identity
