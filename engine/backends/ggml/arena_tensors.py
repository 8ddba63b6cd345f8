"""ggml tensors over one conversation's state arena: its K/V planes and output regions.

The arena stays the single owner of the conversation's numbers. These tensors are only
descriptors whose data pointers sit at the layout's offsets, so a graph writes keys and values
straight into the ring that snapshots, eviction, rebase and the heat map read, with no copy.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ...state.arena import StateArena
from .lib import free_with, ggml, host_buffer

Tensor = object  # a ctypes pointer to a ggml_tensor


class ArenaTensors:
    def __init__(self, arena: StateArena):
        g = ggml()
        self._g = g
        layout = arena.layout
        L, S, kv_dim = layout["k_cache"].shape
        self._arena = arena  # keeps the memory alive as long as the tensors
        planes = sum(layout[name].shape[0] for name in ("kw_cache", "vw_cache", "conv_state",
                                                        "delta_conv", "delta_state")
                     if name in layout)
        self._ctx = g.ggml_init(g.ggml_init_params(
            mem_size=(2 * L + planes + 8) * g.ggml_tensor_overhead(), no_alloc=True))
        self._buffer = host_buffer(arena.base_address, arena.nbytes)
        self._free = free_with(self, self._ctx, self._buffer)
        base = arena.base_address

        def region(name: str, kind: int, *ne: int, offset: int = 0) -> Tensor:
            dims = (ctypes.c_int64 * 4)(*ne, *([1] * (4 - len(ne))))
            t = g.ggml_new_tensor(self._ctx, kind, len(ne), dims)
            g.ggml_backend_tensor_alloc(self._buffer, t, base + layout[name].offset + offset)
            return t

        f32 = g.GGML_TYPE_F32
        kinds = {np.dtype(np.float32): f32, np.dtype(np.float16): g.GGML_TYPE_F16}
        k_kind = kinds[layout["k_cache"].dtype]
        k_plane, v_plane = (layout[name].nbytes // L for name in ("k_cache", "v_cache"))
        # ggml shapes are written fastest dimension first: (kv_dim, S) is numpy's (S, kv_dim).
        self.k_cache = tuple(region("k_cache", k_kind, kv_dim, S, offset=i * k_plane)
                             for i in range(L))
        # Values stored by dimension (state/kv_format.py) are numpy's (kv_dim, S) per layer.
        self.values_by_dimension = layout["v_cache"].view_axes is not None
        v_ne = (S, kv_dim) if self.values_by_dimension else (kv_dim, S)
        self.v_cache = tuple(region("v_cache", kinds[layout["v_cache"].dtype], *v_ne,
                                    offset=i * v_plane) for i in range(L))
        # WINDOW layers' circular planes (engine/state/arena.py add_layer_planes), one each.
        self.kw_cache: tuple[Tensor, ...] = ()
        self.vw_cache: tuple[Tensor, ...] = ()
        if "kw_cache" in layout:
            n_window, W, _ = layout["kw_cache"].shape
            kw_plane, vw_plane = (layout[n].nbytes // n_window for n in ("kw_cache", "vw_cache"))
            self.kw_cache = tuple(region("kw_cache", kinds[layout["kw_cache"].dtype], kv_dim, W,
                                         offset=i * kw_plane) for i in range(n_window))
            vw_ne = (W, kv_dim) if self.values_by_dimension else (kv_dim, W)  # as the ring's
            self.vw_cache = tuple(region("vw_cache", kinds[layout["vw_cache"].dtype], *vw_ne,
                                         offset=i * vw_plane) for i in range(n_window))
        # CONV layers' carries, (taps - 1, d_model) each in numpy's order.
        self.conv_state: tuple[Tensor, ...] = ()
        if "conv_state" in layout:
            n_conv, taps, d_model = layout["conv_state"].shape
            size = layout["conv_state"].nbytes // n_conv
            self.conv_state = tuple(region("conv_state", f32, d_model, taps, offset=i * size)
                                    for i in range(n_conv))
        # DELTA layers' convolution carries (taps - 1, conv_dim) and delta-rule states
        # (v_heads, head, head; each head's matrix transposed, as ggml_gated_delta_net keeps it).
        self.delta_conv: tuple[Tensor, ...] = ()
        self.delta_state: tuple[Tensor, ...] = ()
        if "delta_conv" in layout:
            n_delta, taps, channels = layout["delta_conv"].shape
            size = layout["delta_conv"].nbytes // n_delta
            self.delta_conv = tuple(region("delta_conv", f32, channels, taps, offset=i * size)
                                    for i in range(n_delta))
            _, heads, head, _ = layout["delta_state"].shape
            size = layout["delta_state"].nbytes // n_delta
            self.delta_state = tuple(region("delta_state", f32, head, head, heads, 1,
                                            offset=i * size) for i in range(n_delta))
        self._mass = region("mass", f32, S)  # attention mass per slot, summed over the pass
        self.logits = region("logits", f32, layout["logits"].shape[0])
        d = layout["p_xn"].shape[1]
        self._hidden = region("p_xn", f32, d, layout["p_xn"].shape[0])  # final-normed rows

    def mass(self, ctx, n_kv: int) -> Tensor:
        """The first n_kv entries of the arena's mass region, as a view made in `ctx`."""
        return self._g.ggml_view_1d(ctx, self._mass, n_kv, 0)

    def hidden(self, ctx, n_q: int) -> Tensor:
        """The first n_q rows of the prefill's normed-hidden scratch, as a view made in `ctx`."""
        row = self._hidden.contents.nb[1]
        return self._g.ggml_view_2d(ctx, self._hidden, self._hidden.contents.ne[0], n_q, row, 0)

    def close(self) -> None:
        self._free()
