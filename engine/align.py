"""Byte alignment and rounding: the integer helpers every floor of the engine shares.

The arena's regions, the weight image's tensors, the snapshot's sections and the Vulkan
buffers all start on ALIGN-byte boundaries (a cache line, and what AVX-512 loads want).
"""

from __future__ import annotations

ALIGN = 64


def ceil_div(n: int, d: int) -> int:
    """n / d rounded up, for non-negative n and positive d (say, workgroups covering n items)."""
    return -(-n // d)


def align_up(n: int, alignment: int = ALIGN) -> int:
    """The smallest multiple of `alignment` that is at least n."""
    return ceil_div(n, alignment) * alignment
