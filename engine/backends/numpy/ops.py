"""The numpy forward pass's row operations: RMSNorm in its three shapes and the gated
feed-forward's activations. Each writes into the `out` it is given (arena scratch), so a
decode step allocates nothing; scalars are Python floats, never np.float64.
"""

from __future__ import annotations

import math

import numpy as np


def rmsnorm(x: np.ndarray, weight: np.ndarray, out: np.ndarray, eps: float) -> None:
    """out = x / rms(x) * weight for one row x (d,)."""
    inv = 1.0 / math.sqrt(float(np.dot(x, x)) / x.shape[0] + eps)
    np.multiply(x, inv, out=out)
    np.multiply(out, weight, out=out)


def rmsnorm_rows(x: np.ndarray, weight: np.ndarray, out: np.ndarray, tmp: np.ndarray,
                 eps: float) -> None:
    """Row-wise RMSNorm of x (C, d) into out (C, d); tmp is (C,) scratch."""
    np.einsum("ij,ij->i", x, x, out=tmp)
    np.multiply(tmp, 1.0 / x.shape[1], out=tmp)
    np.add(tmp, eps, out=tmp)
    np.sqrt(tmp, out=tmp)
    np.reciprocal(tmp, out=tmp)
    np.multiply(x, tmp[:, None], out=out)
    np.multiply(out, weight, out=out)


def rmsnorm_heads(x: np.ndarray, weight: np.ndarray, tmp: np.ndarray, eps: float) -> None:
    """In-place RMSNorm of every head vector: x (..., heads, head_dim); tmp (..., heads)."""
    np.einsum("...i,...i->...", x, x, out=tmp)
    np.multiply(tmp, 1.0 / x.shape[-1], out=tmp)
    np.add(tmp, eps, out=tmp)
    np.sqrt(tmp, out=tmp)
    np.reciprocal(tmp, out=tmp)
    np.multiply(x, tmp[..., None], out=x)
    np.multiply(x, weight, out=x)


def silu_mul(gate: np.ndarray, up: np.ndarray, out: np.ndarray) -> None:
    """out = silu(gate) * up, where silu(g) = g / (1 + exp(-g))."""
    np.negative(gate, out=out)
    np.exp(out, out=out)
    np.add(out, 1.0, out=out)
    np.divide(gate, out, out=out)
    np.multiply(out, up, out=out)


GELU_C = math.sqrt(2.0 / math.pi)


def gelu_mul(gate: np.ndarray, up: np.ndarray, out: np.ndarray) -> None:
    """out = gelu(gate) * up, GELU's tanh approximation (GeGLU; HF's gelu_pytorch_tanh):
    gelu(g) = g/2 * (1 + tanh(sqrt(2/pi) * (g + 0.044715 g^3)))."""
    np.multiply(gate, gate, out=out)
    np.multiply(out, 0.044715, out=out)
    np.add(out, 1.0, out=out)
    np.multiply(out, gate, out=out)
    np.multiply(out, GELU_C, out=out)
    np.tanh(out, out=out)
    np.add(out, 1.0, out=out)
    np.multiply(out, gate, out=out)
    np.multiply(out, 0.5, out=out)
    np.multiply(out, up, out=out)


def sigmoid_mul(gate: np.ndarray, x: np.ndarray) -> None:
    """x *= sigmoid(gate), in place; `gate` is overwritten (Qwen3.5's query gate is spent)."""
    np.negative(gate, out=gate)
    np.exp(gate, out=gate)
    np.add(gate, 1.0, out=gate)
    np.divide(x, gate, out=x)
