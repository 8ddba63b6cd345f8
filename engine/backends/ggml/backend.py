"""GgmlBackend: the Backend protocol on ggml's CPU kernels over the GGUF's own blocks.

One backend serves every conversation of a process: it maps each model's GGUF once and owns
ggml's CPU compute backend (its thread pool). Arenas are ordinary prefaulted memory, as for
numpy, so snapshots and every ring operation are shared code.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
import weakref
from collections.abc import Callable, Iterator

from ...errors import UnsupportedArchitectureError
from ...model.config import ModelConfig
from ...model.model import Model
from ...state.arena import Allocator
from ...state.kv_format import F16, KVFormat
from ...state.ring import KVRing
from ..base import model_problem
from . import FEATURES
from .forward import GgmlForward
from .graph import StepGraph
from .lib import ggml
from .threads import ThreadTuner
from .weights import GgmlWeights


def default_threads() -> int:
    """One thread per core this process may run on."""
    return max(1, len(os.sched_getaffinity(0)))


class GgmlBackend:
    name = "ggml"
    needs_f32_weights = False
    # f16 keys: attention reads half the bytes per token (ggml multiplies f16 x f16 exactly as
    # llama.cpp's default cache does). Values stay f32: out_prod, which reads them in place,
    # has no f16 kernel.
    # f16 keys and values, values by dimension: attention's two products then read half the
    # bytes, and the value product runs as one mul_mat over contiguous rows (attend.py).
    kv_format = KVFormat(F16, F16, values_by_dimension=True)
    scratch = None  # no arena scratch: its intermediates live in its own buffers
    features = FEATURES

    def __init__(self, threads: int | None = None):
        g = ggml()  # raises GgmlUnavailableError with the reason
        self.compute_handle = g.ggml_backend_cpu_init()
        if not self.compute_handle:
            raise RuntimeError("ggml could not start its CPU backend")
        self.tuner = ThreadTuner(threads or default_threads())
        self._threads = 0
        # ggml polls an abort callback before each node of a graph: a prefill chunk of
        # hundreds of tokens (seconds on a small CPU) can then stop within one node's time.
        # Installed only while a stoppable graph runs, so decode steps pay nothing for it.
        self._stop: Callable[[], bool] | None = None
        self._abort_callback = g.ggml_abort_callback(self._should_abort)  # kept referenced
        # Shared by the conversations on each model, and let go with the last of them: an
        # engine whose sessions move to another model does not keep the old one's weights.
        self._weights: weakref.WeakValueDictionary[str, GgmlWeights] = \
            weakref.WeakValueDictionary()

    def arena_allocator(self) -> Allocator | None:
        return None

    def make_forward(self, model: Model, ring: KVRing) -> GgmlForward:
        problem = model_problem(self, model.config)
        if problem is not None:  # a feature its graph does not build (FEATURES)
            raise UnsupportedArchitectureError(f"{problem}; use --backend numpy")
        weights = self._weights.get(model.fingerprint)
        if weights is None:
            weights = self._weights[model.fingerprint] = GgmlWeights(model)
        return GgmlForward(self, weights, ring)

    def shape_problem(self, cfg: ModelConfig) -> str | None:
        return None  # ggml's kernels take any width

    def run(self, graph: StepGraph, *, timed: bool,
            should_stop: Callable[[], bool] | None = None) -> bool:
        """Compute a step graph; a timed run (a decode step) teaches the thread tuner.
        Returns False if `should_stop` stopped it part-way: its outputs are then partial."""
        threads = self.tuner.next_count() if timed else self.tuner.batch_count()
        start = time.perf_counter()
        done = self.compute(graph.graph, threads, should_stop)
        if timed and done:
            self.tuner.record(threads, time.perf_counter() - start)
        return done

    def compute(self, graph, threads: int | None = None,
                should_stop: Callable[[], bool] | None = None) -> bool:
        """Run a ggml graph on the CPU backend with `threads` (default: the tuner's pick).
        Returns False if `should_stop` said so between two of its nodes."""
        g = ggml()
        threads = threads or self.tuner.batch_count()
        if threads != self._threads:
            g.ggml_backend_cpu_set_n_threads(self.compute_handle, threads)
            self._threads = threads
        with self._stoppable(should_stop):
            status = g.ggml_backend_graph_compute(self.compute_handle, graph)
        if status == g.GGML_STATUS_ABORTED and should_stop is not None:
            return False
        if status != 0:
            raise RuntimeError(f"ggml graph compute failed with status {status}")
        return True

    @contextlib.contextmanager
    def _stoppable(self, should_stop: Callable[[], bool] | None) -> Iterator[None]:
        if should_stop is None:
            yield
            return
        g = ggml()
        self._stop = should_stop
        g.ggml_backend_cpu_set_abort_callback(self.compute_handle, self._abort_callback, None)
        try:
            yield
        finally:
            g.ggml_backend_cpu_set_abort_callback(self.compute_handle,
                                                  g.ggml_abort_callback(), None)
            self._stop = None

    def _should_abort(self, _data: ctypes.c_void_p) -> bool:
        # Called from ggml's compute thread (the caller's, holding no GIL until here).
        stop = self._stop
        try:
            return bool(stop is not None and stop())
        except Exception:  # an exception cannot cross into C: finish the graph instead
            return False

    def describe(self) -> dict:
        weights = next(iter(self._weights.values()), None)
        return {
            "backend": self.name,
            "arena_memory": "host",
            **self.tuner.describe(),
            "weights_bytes": weights.nbytes if weights else 0,
            "weight_types": weights.type_names() if weights else {},
        }
