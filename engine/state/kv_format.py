"""How a backend keeps the ring's keys and values in the arena: element types and orientation.

Keys are always stored by slot, (L, S, kv_dim): attention reads one slot's key row against a
query. Values may instead be stored by dimension, (L, kv_dim, S): attention then contracts
each dimension's row of S values with the probabilities as one contiguous dot product, which
is what a matrix-multiply kernel reads fastest (ggml's mul_mat wants its operand's rows
contiguous; a slot-major plane would have to be transposed into a copy first). Every reader on
the host sees `v_cache` by slot either way: the arena's view of a by-dimension plane is its
transpose (layout.Region.view_axes), and only code that moves bytes in bulk (snapshots, ring
compaction) looks at how they are stored, to keep its copies contiguous.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)


@dataclass(frozen=True)
class KVFormat:
    key_dtype: np.dtype = field(default=F32)
    value_dtype: np.dtype = field(default=F32)
    values_by_dimension: bool = False  # (L, kv_dim, S) rather than (L, S, kv_dim)

    def __post_init__(self) -> None:
        for name in ("key_dtype", "value_dtype"):
            dtype = np.dtype(getattr(self, name))
            if dtype not in (F32, F16):
                raise ValueError(f"{name} must be float32 or float16, not {dtype}")
            object.__setattr__(self, name, dtype)

    @property
    def slot_item_bytes(self) -> tuple[int, int]:
        """Bytes of one key element and one value element."""
        return self.key_dtype.itemsize, self.value_dtype.itemsize


REFERENCE = KVFormat()  # f32 keys and values by slot: the numpy and Vulkan backends


def stored_by_dimension(plane: np.ndarray) -> bool:
    """Whether a by-slot view (..., S, kv_dim) shows values stored by dimension (its rows are
    strided, its columns contiguous)."""
    return plane.shape[-1] > 1 and plane.strides[-1] != plane.itemsize
