"""IQ-quantized blocks for tests, made and read back by ggml itself.

gguf-py dequantizes the IQ types but cannot quantize them; ggml can (`ggml_quantize_chunk`,
what llama.cpp's quantizer calls). Its first use of IQ1_S, IQ2_* and IQ3_* builds their
lattice search tables (`ggml_quantize_init`): about 17 s on a 2-core machine, IQ1_S alone 9 s.
So quantized blocks are kept once per machine under .cache/ (beside the test weight images),
keyed by the input's bytes, the type and ggml's version: later runs read them back in
milliseconds. Quantization is deterministic, so a kept result is what ggml would make again.

The readers here are ggml's: its type traits' `to_float` (the row dequantizer every ggml op
uses) and a graph's get_rows and mul_mat, as the ggml backend runs them.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT

from engine.backends.ggml.lib import ggml

CACHE = Path(__file__).resolve().parent.parent / ".cache" / "test-weights" / "iq-blocks"
FLOATS = ctypes.POINTER(ctypes.c_float)


def quantize(data: np.ndarray, qtype: QT) -> np.ndarray:
    """(rows, cols) f32 -> (rows, cols / block * block bytes) uint8: ggml's blocks of `qtype`
    (cols a multiple of the block size), from the machine's cache when made before."""
    data = np.ascontiguousarray(data, np.float32)
    rows, cols = data.shape
    block, nbytes = GGML_QUANT_SIZES[qtype]
    if cols % block:
        raise ValueError(f"{qtype.name} rows must be whole {block}-weight blocks, not {cols}")
    key = hashlib.sha256(f"{qtype.name} {data.shape} {version('ggml-python')}".encode()
                         + data.tobytes()).hexdigest()[:24]
    path = CACHE / f"{qtype.name}-{key}.npy"
    if path.is_file():
        return np.load(path)
    g = ggml()
    out = np.zeros((rows, cols // block * nbytes), np.uint8)
    # IQ1_S, IQ2_XXS and IQ2_XS refuse to quantize without an importance matrix
    # (ggml_quantize_requires_imatrix); ones weigh every column alike, the uniform importance
    # the others assume without one.
    importance = np.ones(cols, np.float32)
    g.ggml_quantize_init(int(qtype))  # the lattice tables; a no-op once built
    written = g.ggml_quantize_chunk(int(qtype), data.ctypes.data_as(FLOATS), out.ctypes.data,
                                    0, rows, cols, importance.ctypes.data_as(FLOATS))
    if written != out.nbytes:
        raise RuntimeError(f"ggml wrote {written} bytes of {qtype.name}, expected {out.nbytes}")
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    with open(partial, "wb") as f:  # np.save on a path would append .npy to the temp name
        np.save(f, out)
    os.replace(partial, path)  # whole or absent, with other test processes about
    return out


def to_float(blocks: np.ndarray, qtype: QT, shape: tuple[int, int]) -> np.ndarray:
    """ggml's own dequantization of (rows, block bytes) blocks: the type's to_float."""
    blocks = np.ascontiguousarray(blocks)
    out = np.empty(shape, np.float32)
    traits = ggml().ggml_get_type_traits(int(qtype)).contents
    traits.to_float(blocks.ctypes.data, out.ctypes.data_as(FLOATS), out.size)
    return out


def _run(build: Callable, blocks: np.ndarray, qtype: QT, shape: tuple[int, int],
         x: np.ndarray | None = None) -> np.ndarray:
    """Compute `build(ctx, weight, x)` in a one-off ggml graph over a copy of the blocks (and
    of x, (n, cols) f32, if given) on one thread; the f32 result as (ne1, ne0)."""
    g = ggml()
    rows, cols = shape
    n = 0 if x is None else len(x)
    # The blocks, x, the result (get_rows: rows x cols; mul_mat: n x rows), the row index, and
    # the work buffer compute_with_ctx takes from the context (x in its vec-dot type).
    floats = rows + rows * cols + 2 * n * cols + n * rows
    size = blocks.nbytes + 4 * floats + 8 * g.ggml_tensor_overhead() + g.ggml_graph_overhead()
    ctx = g.ggml_init(g.ggml_init_params(mem_size=size + (1 << 20), no_alloc=False))
    try:
        weight = g.ggml_new_tensor_2d(ctx, int(qtype), cols, rows)
        ctypes.memmove(g.ggml_get_data(weight), np.ascontiguousarray(blocks).ctypes.data,
                       blocks.nbytes)
        xt = None
        if x is not None:
            xt = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, cols, len(x))
            ctypes.memmove(g.ggml_get_data(xt), np.ascontiguousarray(x, np.float32).ctypes.data,
                           x.nbytes)
        result = build(g, ctx, weight, xt)
        graph = g.ggml_new_graph(ctx)
        g.ggml_build_forward_expand(graph, result)
        g.ggml_graph_compute_with_ctx(ctx, graph, 1)
        ne = result.contents.ne
        out = np.empty((ne[1], ne[0]), np.float32)
        ctypes.memmove(out.ctypes.data, g.ggml_get_data(result), out.nbytes)
        return out
    finally:
        g.ggml_free(ctx)


def get_rows(blocks: np.ndarray, qtype: QT, shape: tuple[int, int]) -> np.ndarray:
    """Every row expanded to f32 by a graph's get_rows: how the ggml backend reads token
    embeddings and expands a matrix for a batched product."""
    def build(g, ctx, weight, _x):
        index = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_I32, shape[0])
        ids = np.arange(shape[0], dtype=np.int32)
        ctypes.memmove(g.ggml_get_data(index), ids.ctypes.data, ids.nbytes)
        return g.ggml_get_rows(ctx, weight, index)

    return _run(build, blocks, qtype, shape)


def mul_mat(blocks: np.ndarray, qtype: QT, shape: tuple[int, int],
            x: np.ndarray) -> np.ndarray:
    """x (n, cols) times the quantized matrix's transpose, (n, rows), by ggml's mul_mat: it
    rounds x to its vec-dot type (Q8_K or Q8_0 blocks) first, as in a decode step."""
    return _run(lambda g, ctx, weight, xt: g.ggml_mul_mat(ctx, weight, xt), blocks, qtype,
                shape, x)
