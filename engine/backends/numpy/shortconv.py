"""CONV layers (LFM2's short convolution) in the numpy forward pass.

A CONV layer runs in attention's place (after the layer's operator norm, before the residual
add): in_proj makes three d_model-wide parts of each row, B, C and x (in that order, as HF's
`BCx.chunk(3)` and llama.cpp's views split them); B*x goes through a causal depthwise
convolution over time, each channel with its own `conv_kernel` taps; C times the convolution's
output goes through out_proj. The convolution at token t reads B*x of tokens t - K .. t
(K = conv_kernel - 1), so the layer's state is the last K rows of B*x: its carry, the
arena's `conv_state` plane (engine/state/arena.py's add_layer_planes), oldest first.

Prefill and decode run the same code on R rows (a chunk, or the one decode row): the carry
and the rows' B*x are laid end to end in a window (K + R, d), tap j of the convolution
multiplies window rows j .. j + R - 1, and the window's last K rows become the new carry.
A carry never attends and is never evicted: it has seen every token since the conversation
began, whatever the ring forgot (docs/memory.md).
"""

from __future__ import annotations

import numpy as np

from ...model.weights import LayerWeights


def short_conv(lw: LayerWeights, xn: np.ndarray, carry: np.ndarray, bcx: np.ndarray,
               window: np.ndarray, out: np.ndarray) -> None:
    """The short-convolution block of R normed rows `xn` (R, d), or one row (d,), into `out`
    (same shape), updating `carry` (K, d) in place. Scratch: `bcx` (R, 3d) or (3d,), and
    `window` (K + R, d). `xn` is overwritten (it is spent once in_proj has read it)."""
    d, K = carry.shape[1], carry.shape[0]
    xn2, bcx2, out2 = (a.reshape(-1, a.shape[-1]) for a in (xn, bcx, out))
    R = xn2.shape[0]
    np.matmul(xn2, lw.conv_in.T, out=bcx2)
    b, c, x = bcx2[:, :d], bcx2[:, d : 2 * d], bcx2[:, 2 * d :]
    np.copyto(window[:K], carry)
    np.multiply(b, x, out=window[K:])
    # B is spent once B*x is in the window: its columns collect the convolution's output.
    taps, acc, tmp = lw.conv_weight, b, xn2
    np.multiply(window[:R], taps[:, 0], out=acc)
    for j in range(1, K + 1):
        np.multiply(window[j : j + R], taps[:, j], out=tmp)
        np.add(acc, tmp, out=acc)
    np.copyto(carry, window[R:])
    np.multiply(acc, c, out=acc)
    np.matmul(acc, lw.conv_out.T, out=out2)
