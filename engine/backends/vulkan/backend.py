"""VulkanBackend: engine/backends/base.py's Backend protocol on a Vulkan device.

One backend serves every conversation of a process: it uploads each model's quantized weights
once and hands out arenas in host-visible device memory. Arenas are registered by address so
make_forward can find the device buffer behind the conversation's StateArena.
"""

from __future__ import annotations

import contextlib
import mmap
import weakref

import numpy as np

from ...align import align_up
from ...model.architecture import DELTA
from ...model.config import ModelConfig
from ...model.model import Model
from ...state.arena import Allocator
from ...state.kv_format import REFERENCE
from ...state.ring import KVRing
from ..base import model_problem
from ..ggml import FEATURES as GGML_FEATURES
from . import FEATURES
from .buffers import DeviceBuffer, host_buffer
from .context import HOST_COHERENT, HOST_VISIBLE, Context, get_context
from .forward import VulkanForward
from .loader import UnsupportedModelForVulkanError
from .pipelines import get_pipelines
from .recurrent import delta_width_problem
from .tuning import tuning_for
from .upload import fill_zero
from .weights import DeviceWeights, upload_weights

PAGE = 4096


def lazy_anonymous_memory(nbytes: int) -> np.ndarray:
    """Zeroed anonymous memory, faulted in only where written. A decode step writes one slot
    of each layer's K and V plane, so an untouched ring costs no RSS. Huge pages where the
    kernel allows: a restore then faults 2 MiB at a time, not 4 KiB."""
    mapping = mmap.mmap(-1, align_up(nbytes, PAGE),
                        flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        with contextlib.suppress(OSError):
            mapping.madvise(mmap.MADV_HUGEPAGE)
    return np.frombuffer(mapping, np.uint8)


class VulkanBackend:
    name = "vulkan"
    needs_f32_weights = False
    kv_format = REFERENCE  # the shaders read f32 keys and values, by slot
    scratch = None  # no arena scratch: its intermediates live in its own buffers
    features = FEATURES

    def __init__(self, ctx: Context | None = None):
        self.ctx = ctx or get_context()  # raises VulkanUnavailableError with the reason
        self.pipes = get_pipelines(self.ctx)
        self.tuning = tuning_for(self.ctx)
        self._weights: dict[str, DeviceWeights] = {}
        self._arenas: weakref.WeakValueDictionary[int, DeviceBuffer] = weakref.WeakValueDictionary()
        self._blas_limit = None
        self.arena_path = "none yet"
        self.snapshot_path = "none yet"  # 'mapped' or 'staging', as VulkanForward decides

    # -- Backend protocol -----------------------------------------------------------------
    def arena_allocator(self) -> Allocator:
        return self._allocate_arena

    def make_forward(self, model: Model, ring: KVRing) -> VulkanForward:
        problem = model_problem(self, model.config)
        if problem is not None:  # the CPU backend to use instead: ggml where it can
            cpu = "ggml" if model.config.features <= GGML_FEATURES else "numpy"
            raise UnsupportedModelForVulkanError(f"{problem}; use --backend {cpu}")
        buf = self._arena_buffer(ring.arena.base_address, ring.arena.nbytes)
        if model.fingerprint not in self._weights:
            self._weights[model.fingerprint] = upload_weights(self.ctx, model)
        self._limit_blas_threads()
        forward = VulkanForward(self.pipes, self._weights[model.fingerprint], ring, buf,
                                self.tuning)
        self.snapshot_path = forward.snapshot_path
        return forward

    def shape_problem(self, cfg: ModelConfig) -> str | None:
        if DELTA in cfg.kinds:
            return delta_width_problem(cfg.delta_head_dim, self.ctx.limits.max_invocations)
        return None

    def describe(self) -> dict:
        info = self.ctx.info
        weights = next(iter(self._weights.values()), None)
        return {
            "backend": self.name,
            "device": info.as_dict(),
            "arena_memory": self.arena_path,
            "snapshot_path": self.snapshot_path,
            "weights_bytes": weights.nbytes if weights else 0,
            "weight_types": weights.types if weights else {},  # the GGUF's, as ggml's
            "weight_encodings": weights.encodings if weights else {},
            "tuning": self.tuning.__dict__,
        }

    # -- arenas ---------------------------------------------------------------------------
    def _allocate_arena(self, nbytes: int) -> np.ndarray:
        ctx = self.ctx
        if ctx.host_import:
            # CPU device: lazily zeroed host pages become the device memory, so untouched K/V
            # planes cost no RSS and no zeroing pass.
            host = lazy_anonymous_memory(nbytes)  # page-aligned, as the import requires
            buf = DeviceBuffer(ctx, host.nbytes, HOST_VISIBLE | HOST_COHERENT, host=host,
                               label="arena")
            self.arena_path = "mapped: imported host memory (CPU device)"
        else:
            buf = host_buffer(ctx, nbytes, "arena")
            fill_zero(ctx, buf)
            self.arena_path = f"mapped: {buf.describe_memory()}"
        self._arenas[buf.address] = buf
        return buf.array[:nbytes]

    def _arena_buffer(self, address: int, nbytes: int) -> DeviceBuffer:
        for start, buf in list(self._arenas.items()):
            if start <= address and address + nbytes <= start + buf.size:
                return buf
        raise ValueError("the conversation's arena was not allocated by this Vulkan backend")

    def _limit_blas_threads(self) -> None:
        """On a CPU device, OpenBLAS threads spinning after numpy calls steal lavapipe's cores;
        keep BLAS single-threaded for as long as this backend lives."""
        if self._blas_limit is None and not self.ctx.is_gpu:
            from threadpoolctl import threadpool_limits  # noqa: PLC0415 - CPU devices only

            self._blas_limit = threadpool_limits(limits=1, user_api="blas")
