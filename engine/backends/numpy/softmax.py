"""Row softmaxes of attention scores, in place and allocation-free (numpy forward pass)."""

from __future__ import annotations

import numpy as np


def exp_rows(s: np.ndarray, row_max: np.ndarray, inv_sum: np.ndarray) -> None:
    """s (R, N) <- exp(s - rowmax) in place, inv_sum (R,) <- 1 / rowsum: softmax, unscaled."""
    np.max(s, axis=1, out=row_max)
    np.subtract(s, row_max[:, None], out=s)
    np.exp(s, out=s)
    np.sum(s, axis=1, out=inv_sum)
    np.reciprocal(inv_sum, out=inv_sum)


def softmax_few_rows(s: np.ndarray, row_max: np.ndarray, row_sum: np.ndarray) -> None:
    """In-place softmax for a handful of rows (decode's heads), row by row: a broadcast ufunc
    goes through numpy's buffered iterator, which mallocs up to 32 KB of scratch per call."""
    np.max(s, axis=1, out=row_max)
    for row, peak in zip(s, row_max):
        np.subtract(row, peak, out=row)
    np.exp(s, out=s)
    np.sum(s, axis=1, out=row_sum)
    np.reciprocal(row_sum, out=row_sum)
    for row, scale in zip(s, row_sum):
        np.multiply(row, scale, out=row)
