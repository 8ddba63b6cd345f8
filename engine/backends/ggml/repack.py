"""ggml's repacked weight layouts: Q4_0, Q4_K and IQ4_NL interleaved for its AVX2 GEMV/GEMM.

ggml's CPU backend offers an extra buffer type ("CPU_REPACK") whose tensors hold rows of such
types interleaved 8 at a time, which its matrix kernels read about twice as fast. llama.cpp
uses it for every weight it can. Repacking is a copy, so the mapping's pages of a repacked
matrix are released afterwards: the weights are still resident once, not twice.
A tensor goes there only where ggml's own choice (ggml_repack_get_optimal_repack_type) would
find a layout for it; anything else stays a view of the mapping.
"""

from __future__ import annotations

import ctypes

from .lib import ggml

REPACK_BUFFER = b"CPU_REPACK"


def repack_buffer_type():
    """The CPU backend's repack buffer type, or None where this build or CPU has none."""
    g = ggml()
    reg = g.ggml_backend_cpu_reg()
    get_address = g.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts")
    if not reg or not get_address:
        return None
    extra_bufts = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(get_address)
    types = extra_bufts(g.ggml_backend_reg_dev_get(reg, 0))
    i = 0
    while types and types[i]:
        if g.ggml_backend_buft_name(types[i]) == REPACK_BUFFER:
            return types[i]
        i += 1
    return None


def can_repack(tensor) -> bool:
    """Mirrors ggml_repack_get_optimal_repack_type on x86: AVX2 layouts of 8 interleaved rows."""
    g = ggml()
    t = tensor.contents
    kinds = (g.GGML_TYPE_Q4_0, g.GGML_TYPE_Q4_K, g.GGML_TYPE_IQ4_NL)
    return bool(g.ggml_cpu_has_avx2()) and t.type in kinds and t.ne[1] % 8 == 0 \
        and t.ne[2] == 1 and t.ne[3] == 1
