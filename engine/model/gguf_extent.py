"""Where a GGUF's tensor data ends, from its header alone: a file shorter than that is
truncated (an interrupted download) and cannot load, however well its header reads.

The tensor data starts at the end of the tensor table rounded up to `general.alignment`
(32 by default); each tensor's bytes are its element count over its type's block size times
the block's bytes (gguf-py's GGML_QUANT_SIZES), at its offset from that start.
"""

from __future__ import annotations

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from ..align import align_up
from .gguf_header import GGUFHeader

DEFAULT_ALIGNMENT = 32


def tensor_data_end(header: GGUFHeader) -> int | None:
    """The byte just past the last tensor's data; None when a tensor's type is unknown or
    the alignment invalid (other checks name those)."""
    alignment = header.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        return None
    start = align_up(header.header_bytes, alignment)
    end = start
    for t in header.tensors:
        try:
            block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(t.ggml_type)]
        except (ValueError, KeyError):
            return None
        end = max(end, start + t.offset + t.n_elements // block * block_bytes)
    return end


def truncation_problem(header: GGUFHeader, file_size: int) -> str | None:
    """Why a file of `file_size` bytes cannot hold the tensors its header lists, or None."""
    end = tensor_data_end(header)
    if end is None or end <= file_size:
        return None
    return (f"file truncated: its tensor data ends at byte {end:,}, the file has "
            f"{file_size:,} (an interrupted download?)")
