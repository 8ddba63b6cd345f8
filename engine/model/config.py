"""The model's geometry as one flat dataclass, read from GGUF metadata."""

from __future__ import annotations

from dataclasses import dataclass

from .architecture import (
    ARCHITECTURES,
    CONV,
    DELTA,
    FULL,
    LAYER_KINDS,
    WINDOW,
    Architecture,
    needed_features,
    query_scale,
)
from .tensor_types import type_features


@dataclass(frozen=True)
class ModelConfig:
    """Geometry of a model, read from GGUF metadata; `arch` says what kind of model it is."""

    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    vocab_size: int
    context_length: int
    rope_theta: float
    rms_eps: float
    tied_embeddings: bool
    architecture: str = "llama"  # a key of architecture.ARCHITECTURES
    rope_freq_scale: float = 1.0  # linear RoPE scaling: positions are multiplied by this
    rope_freq_factors: tuple[float, ...] = ()  # (head_dim/2,) divisors of each frequency
    sliding_window: int = 0  # attention span the model was trained with (0: its context)
    # What each layer's state is (architecture.LAYER_KINDS); () means every layer is FULL,
    # a K/V plane in the ring, as in every model before hybrids.
    layer_kinds: tuple[str, ...] = ()
    window: int = 0  # WINDOW layers see the newest `window` tokens (Gemma 3: 512)
    conv_kernel: int = 0  # CONV layers: the short convolution's length (LFM2's L_cache, 3)
    rope_theta_window: float = 0.0  # WINDOW layers' RoPE base, where it differs (Gemma 3)
    rope_dim: int = 0  # dims of each head RoPE rotates (0: all; Qwen3.5: 64 of 256)
    # DELTA layers (Qwen3.5's gated delta net, model/delta_net.py): key heads, value heads and
    # their common width; conv_kernel is their convolution's taps.
    delta_k_heads: int = 0
    delta_v_heads: int = 0
    delta_head_dim: int = 0
    # The ggml types of the file's tensors, by name, sorted (tensor_types.py): each is a
    # backend feature, so a backend that cannot read one is refused before it loads weights.
    # (): not recorded (a config made by hand), which asks nothing of a backend.
    tensor_types: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.layer_kinds and len(self.layer_kinds) != self.n_layers:
            raise ValueError(f"{len(self.layer_kinds)} layer kinds for {self.n_layers} layers")
        unknown = set(self.layer_kinds) - set(LAYER_KINDS)
        if unknown:
            raise ValueError(f"unknown layer kinds {sorted(unknown)}")
        if WINDOW in self.layer_kinds and self.window < 1:
            raise ValueError("window layers need a window of at least one token")
        if CONV in self.layer_kinds and self.conv_kernel < 2:
            raise ValueError("conv layers need a kernel of at least 2")
        if DELTA in self.layer_kinds and (self.conv_kernel < 2 or self.delta_k_heads < 1 or
                                          self.delta_v_heads % self.delta_k_heads or
                                          self.delta_head_dim < 1):
            raise ValueError("delta layers need a kernel of at least 2 and value heads a "
                             "multiple of their key heads")
        if not 0 <= self.rope_dim <= self.head_dim or self.rope_dim % 2:
            raise ValueError(f"cannot rotate {self.rope_dim} of a head's {self.head_dim} dims")

    @property
    def kinds(self) -> tuple[str, ...]:
        """Each layer's state kind."""
        return self.layer_kinds or (FULL,) * self.n_layers

    @property
    def hybrid(self) -> bool:
        """Whether any layer keeps state other than a K/V plane in the ring."""
        return any(kind != FULL for kind in self.kinds)

    def layers_of(self, kind: str) -> tuple[int, ...]:
        """The layers of one kind, in order: plane j of that kind belongs to layer [j]."""
        return tuple(i for i, k in enumerate(self.kinds) if k == kind)

    def plane(self, layer: int) -> int:
        """Where `layer`'s state sits among the planes of its kind."""
        kind = self.kinds[layer]
        return self.kinds[:layer].count(kind)

    @property
    def n_full(self) -> int:
        """Layers whose K/V live in the ring (and whose attention feeds salience)."""
        return self.kinds.count(FULL)

    @property
    def arch(self) -> Architecture:
        return ARCHITECTURES[self.architecture]

    @property
    def features(self) -> frozenset[str]:
        """What a backend must implement to run this model: its forward pass's features and
        the tensor types it reads."""
        return needed_features(self.arch, self.q_dim, self.d_model, WINDOW in self.kinds,
                               CONV in self.kinds, DELTA in self.kinds,
                               self.rotary_dim < self.head_dim) | type_features(self.tensor_types)

    @property
    def rotary_dim(self) -> int:
        """The leading dims of each head that RoPE rotates."""
        return self.rope_dim or self.head_dim

    @property
    def delta_conv_dim(self) -> int:
        """A DELTA layer's convolved channels: q | k | v."""
        return (2 * self.delta_k_heads + self.delta_v_heads) * self.delta_head_dim

    @property
    def delta_inner(self) -> int:
        """A DELTA layer's value width (its output, and its gate z)."""
        return self.delta_v_heads * self.delta_head_dim

    @property
    def q_scale(self) -> float:
        """What queries are multiplied by before q.k (1/sqrt(head_dim) in most models)."""
        return query_scale(self.arch, self.n_layers, self.d_model, self.n_heads, self.head_dim)

    @classmethod
    def from_dict(cls, record: dict) -> ModelConfig:
        """Rebuild from `dataclasses.asdict` output that went through JSON (lists for tuples)."""
        return cls(**{**record, "rope_freq_factors": tuple(record.get("rope_freq_factors", ())),
                      "layer_kinds": tuple(record.get("layer_kinds", ())),
                      "tensor_types": tuple(record.get("tensor_types", ()))})

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def group_size(self) -> int:
        """Query heads per K/V head (grouped-query attention)."""
        return self.n_heads // self.n_kv_heads

    @property
    def qkv_dim(self) -> int:
        """What an attention layer's one projection makes: q | k | v, then the query gate
        (q_dim more) where the architecture gates its queries."""
        return self.q_dim * (2 if self.arch.gated_query else 1) + 2 * self.kv_dim

    def kv_bytes_per_slot(self, key_itemsize: int, value_itemsize: int) -> int:
        """Bytes one ring slot's keys and values take over the ring's (FULL) layers."""
        return self.n_full * self.kv_dim * (key_itemsize + value_itemsize)
