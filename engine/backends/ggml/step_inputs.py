"""The inputs of a built step graph, as numpy views of the graph's input tensors.

The caller fills them before each compute (forward.py); values stored by dimension
(engine/state/kv_format.py) also need where each new value lands, which `place_values`
derives from the slots and window rows once those are filled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ...model.config import ModelConfig
from .attend import query_blocks
from .lib import array_at, data_address


@dataclass
class StepInputs:
    tokens: np.ndarray  # (n_q,) int32: token ids
    positions: np.ndarray  # (n_q,) int32: RoPE position of each new token
    slots: np.ndarray  # (n_q,) int64: ring slot each new token's K/V is written to
    # Values stored by dimension (empty otherwise): where each new value lands in a layer's
    # plane flattened, (n_q, kv_dim) int64: dimension j of the token in slot s at j * S + s.
    value_slots: np.ndarray
    # one per query block, (rows, n_kv) float32: 0 where a query may attend a slot, else
    # -inf (for every head); the blocks' rows in order are the n_q new tokens
    masks: list[np.ndarray]
    # WINDOW layers (empty where there are none): the circular row of each new token, and
    # the mask over the keys a window layer attends: its plane's rows (decode, written first)
    # or the plane's old rows then the chunk's own keys (prefill).
    wslots: np.ndarray
    wmask: np.ndarray  # (n_q, window keys)
    # Window value planes stored by dimension (empty otherwise): where the values of the
    # newest min(n_q, window) tokens land in a plane flattened, (kept, kv_dim) int64.
    window_value_slots: np.ndarray
    # j * rows for each dimension j of a ring plane and of a window plane (empty if unused)
    dimension_offsets: np.ndarray = field(repr=False)
    window_dimension_offsets: np.ndarray = field(repr=False)

    @classmethod
    def of(cls, inputs: dict, cfg: ModelConfig, blocks: Sequence[tuple[int, int]],
           ring_slots: int) -> StepInputs:
        """Views of the named input tensors of an allocated graph (graph.py's builder names
        them), and its constants written: ones for summing rows, 0..rows-1 for gathers, the
        zero padding of a grouped decode product's queries (attend.py)."""
        G, none = cfg.group_size, np.empty((0, 0), np.int64)
        n_q = sum(rows for rows, _ in blocks)
        windowed, by_dimension = "wslots" in inputs, "value_slots" in inputs
        kept = min(n_q, cfg.window) if windowed and by_dimension else 0
        dims = np.arange(cfg.kv_dim if by_dimension else 0, dtype=np.int64)
        tensor_array(inputs["ones"], np.float32)[:] = 1.0
        if "query_blocks" in inputs:
            padding = inputs["query_blocks"]  # (groups, heads * G, heads, head_dim)
            tensor_array(padding, np.float32)[:] = query_blocks(
                cfg.head_dim, cfg.n_kv_heads, G, heads=padding.contents.ne[1]).ravel()
        if "arange" in inputs:
            arange = tensor_array(inputs["arange"], np.int32)
            arange[:] = np.arange(arange.shape[0], dtype=np.int32)
        return cls(
            tokens=tensor_array(inputs["tokens"], np.int32),
            positions=tensor_array(inputs["positions"], np.int32),
            slots=tensor_array(inputs["slots"], np.int64),
            value_slots=(tensor_array(inputs["value_slots"], np.int64).reshape(n_q, cfg.kv_dim)
                         if by_dimension else none),
            masks=[tensor_array(inputs[f"mask{b}"], np.float32).reshape(rows, n_kv)
                   for b, (rows, n_kv) in enumerate(blocks)],
            wslots=tensor_array(inputs["wslots"], np.int64) if windowed else np.empty(0),
            wmask=(tensor_array(inputs["wmask"], np.float32).reshape(n_q, -1) if windowed
                   else np.empty((0, 0), np.float32)),
            window_value_slots=(
                tensor_array(inputs["wvalue_slots"], np.int64).reshape(kept, cfg.kv_dim)
                if kept else none),
            dimension_offsets=dims * ring_slots,
            window_dimension_offsets=dims * cfg.window if kept else dims[:0],
        )

    def place_values(self) -> None:
        """Where the new tokens' values go, from their ring slots and window rows (once
        `slots` and `wslots` are filled): a plane stored by dimension takes each of a token's
        values in its own row."""
        if self.dimension_offsets.size:
            np.add(self.slots[:, None], self.dimension_offsets, out=self.value_slots)
        if self.window_dimension_offsets.size:
            newest = self.wslots[self.wslots.shape[0] - self.window_value_slots.shape[0]:]
            np.add(newest[:, None], self.window_dimension_offsets, out=self.window_value_slots)


def tensor_array(tensor, dtype) -> np.ndarray:
    """A numpy view of an allocated, contiguous ggml tensor's elements (flat)."""
    count = 1
    for dim in tensor.contents.ne:
        count *= dim
    return array_at(data_address(tensor), dtype, count)
