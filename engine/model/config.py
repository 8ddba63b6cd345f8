"""The model's geometry as one flat dataclass, read from GGUF metadata."""

from __future__ import annotations

from dataclasses import dataclass

from .architecture import ARCHITECTURES, Architecture, needed_features


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

    @property
    def arch(self) -> Architecture:
        return ARCHITECTURES[self.architecture]

    @property
    def features(self) -> frozenset[str]:
        """What a backend's forward pass must implement to run this model."""
        return needed_features(self.arch, self.q_dim, self.d_model)

    @classmethod
    def from_dict(cls, record: dict) -> ModelConfig:
        """Rebuild from `dataclasses.asdict` output that went through JSON (lists for tuples)."""
        return cls(**{**record, "rope_freq_factors": tuple(record.get("rope_freq_factors", ()))})

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
        return self.q_dim + 2 * self.kv_dim

    def kv_bytes_per_slot(self, key_itemsize: int, value_itemsize: int) -> int:
        """Bytes one ring slot's keys and values take over all layers."""
        return self.n_layers * self.kv_dim * (key_itemsize + value_itemsize)
