"""Finding ggml (the `ggml-python` bindings) and the few ctypes helpers the backend needs.

ggml is optional: `pip install ggml-python` compiles it from source, which needs a C compiler.
Every way it can be missing becomes one GgmlUnavailableError whose message says what to do, so
`--backend ggml` can say it in one line and `auto` can fall back to numpy.
"""

from __future__ import annotations

import ctypes
import logging
import weakref
from types import ModuleType
from typing import NewType

import numpy as np

from ...errors import ChannelError

INSTALL_HINT = "pip install ggml-python==0.0.45 (builds ggml from source; needs a C compiler)"


class GgmlUnavailableError(ChannelError):
    """The ggml bindings are not installed or their library does not load."""


_ggml: ModuleType | None = None


def ggml() -> ModuleType:
    """The `ggml` module, imported once; raises GgmlUnavailableError with the reason."""
    global _ggml
    if _ggml is None:
        try:
            import ggml as module  # noqa: PLC0415 - optional dependency, loaded on first use
        except ImportError:
            raise GgmlUnavailableError(f"the ggml bindings are not installed ({INSTALL_HINT})")\
                from None
        except (OSError, RuntimeError, TypeError) as exc:
            # The bindings dlopen libggml at import; a broken build fails here.
            raise GgmlUnavailableError(f"the ggml library does not load: {exc}") from None
        _repair_handle_types(module)
        _route_log(module)
        _ggml = module
    return _ggml


log = logging.getLogger("channel.ggml")
_log_callback = None  # kept referenced: ggml calls it from C for the life of the process


def _route_log(module: ModuleType) -> None:
    """ggml prints to stderr by default (a line per repacked tensor, for one), which would
    break the CLI's one-line errors; send its messages to our log instead."""
    global _log_callback
    # ggml's INFO level is chatty (one line per repacked tensor): debug here.
    levels = {3: logging.WARNING, 4: logging.ERROR}

    def forward(level: int, text: bytes, _user) -> None:
        message = text.decode(errors="replace").rstrip()
        if message:
            log.log(levels.get(level, logging.DEBUG), "%s", message)

    _log_callback = module.ggml_log_callback(forward)
    module.ggml_log_set(_log_callback, None)


def _repair_handle_types(module: ModuleType) -> None:
    """ggml-python 0.0.45 declares a few opaque handles (buffer, buffer type, backend) as
    `typing.NewType(..., int)` in argtypes/restype. ctypes then passes or returns them as a
    32-bit C int, truncating the pointer; declare them as pointers."""
    for value in vars(module).values():
        if not isinstance(value, ctypes._CFuncPtr):
            continue
        if isinstance(value.restype, NewType):
            value.restype = ctypes.c_void_p
        if value.argtypes and any(isinstance(a, NewType) for a in value.argtypes):
            value.argtypes = [ctypes.c_void_p if isinstance(a, NewType) else a
                              for a in value.argtypes]


def available() -> str | None:
    """None if ggml can be used, else the one-line reason it cannot."""
    try:
        ggml()
    except GgmlUnavailableError as exc:
        return str(exc)
    return None


def array_at(address: int, dtype: np.dtype | type, count: int) -> np.ndarray:
    """A writable numpy view of `count` items of `dtype` at a raw address (no copy)."""
    dtype = np.dtype(dtype)
    raw = (ctypes.c_uint8 * (count * dtype.itemsize)).from_address(address)
    return np.frombuffer(raw, dtype, count)


TENSOR_ALIGNMENT = 32  # ggml's CPU buffers must start at a multiple of this


def host_buffer(address: int, nbytes: int):
    """A ggml CPU buffer over existing memory (not owned: freeing it frees nothing). Its base is
    rounded down to ggml's alignment, so any address inside can hold a tensor."""
    base = address - address % TENSOR_ALIGNMENT
    return ggml().ggml_backend_cpu_buffer_from_ptr(base, nbytes + (address - base))


def data_address(tensor) -> int:
    """The address of a ggml tensor's data (it must be allocated)."""
    address = tensor.contents.data
    if not address:
        raise ValueError(f"ggml tensor {tensor.contents.name!r} has no data yet")
    return int(address)


def free_with(owner: object, context=None, buffer=None, allocators=()) -> weakref.finalize:
    """Free ggml objects (a context, a host buffer, graph allocators) when `owner` is collected
    or when the returned finalizer is called, whichever comes first; at most once."""

    g = ggml()  # bound now: at interpreter exit the module global may already be gone

    def release() -> None:
        for allocator in allocators:
            g.ggml_gallocr_free(allocator)
        if context is not None:
            g.ggml_free(context)
        if buffer is not None:
            g.ggml_backend_buffer_free(buffer)

    return weakref.finalize(owner, release)
