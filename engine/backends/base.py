"""The one seam between the engine and its compute backends: `Backend` and `ForwardPass`.

A backend supplies the arena's single payload allocation (ordinary memory for numpy and ggml,
mapped host-visible device memory for Vulkan), declares the architecture features its forward
pass implements (`features`, names from engine/model/architecture.py's FEATURES), and makes
a forward pass per conversation. A forward pass's `prefill(tokens, anchors=, on_hidden=,
should_stop=)` and `decode_one_token(token)` both reserve and commit ring slots, write
post-RoPE keys and values into the arena's `k_cache`/`v_cache`, accumulate attention mass
into `mass`, and leave next-token logits in `logits`. Everything else (ring policy, sampler,
snapshots) is shared and backend-agnostic.

Implementations: `ggml/` (GgmlBackend, the CPU default), `numpy/` (NumpyBackend, the f32
reference) and `vulkan/` (VulkanBackend); select.py picks one for a process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from ..model.architecture import backend_problem
from ..model.config import ModelConfig
from ..model.model import Model
from ..state.arena import Allocator, ScratchPlan
from ..state.kv_format import KVFormat
from ..state.ring import KVRing, SlotSpan

HiddenCallback = Callable[[np.ndarray], None]  # receives final-normed hidden rows (C, d_model)
# (span, chunk, is the last one) -> False if the pass was stopped part-way (None: it ran)
ChunkPass = Callable[[SlotSpan, Sequence[int], bool], "bool | None"]
ProgressCallback = Callable[[int], None]  # receives the tokens of a prefill committed so far
# (span, tokens, chunk size) -> the mass of each chunk of the span in order, or None if the
# pass was stopped part-way: one pass over several chunks (prefill_in_chunks' `run_group`)
GroupPass = Callable[[SlotSpan, Sequence[int], int], "list[np.ndarray] | None"]


def prefill_in_chunks(ring: KVRing, tokens: Sequence[int], chunk_limit: int,
                      run_chunk: ChunkPass, *, anchors: bool = False,
                      should_stop: Callable[[], bool] | None = None,
                      scored: bool = False, on_progress: ProgressCallback | None = None,
                      run_group: GroupPass | None = None, group_limit: int = 0) -> bool:
    """Every backend's prefill loop: reserve ring slots for a chunk of at most `chunk_limit`
    tokens, run the backend's pass over it, commit it, report the tokens done so far to
    `on_progress`. `should_stop` is polled between chunks, and by a pass that can stop inside
    a chunk (ggml's); a stop returns False, leaving every committed chunk in place and, if it
    came inside one, that chunk's slots reserved and half written: the caller rebuilds the
    state after a stop (Session._withdraw). `scored`: the pass folds its mass into the ring's
    scores itself (KVRing.commit).

    `run_group` runs up to `group_limit` tokens, whole chunks of `chunk_limit`, as one pass
    where the ring takes them without evicting or rebasing; it returns each chunk's mass, and
    the chunks are committed one by one as if each had run alone, so the ring's scores come
    out as the chunked loop's."""
    if not tokens:
        raise ValueError("prefill needs at least one token")
    limit = min(chunk_limit, ring.max_admit())
    if limit < 1:
        raise ValueError("the ring has no room for new tokens (anchors fill it)")
    start = 0
    while start < len(tokens):
        if should_stop is not None and should_stop():
            return False
        group = min(group_limit, len(tokens) - start) // limit * limit  # whole chunks
        if run_group is not None and group > limit and ring.takes_whole(group):
            span = ring.reserve(group)
            masses = run_group(span, tokens[start : start + group], limit)
            if masses is None:
                return False
            for offset, mass in zip(range(0, group, limit), masses, strict=True):
                count = min(limit, group - offset)
                ring.commit(SlotSpan(span.start + offset, count, span.pos + offset), mass,
                            anchors=anchors, scored=scored)
                if on_progress is not None:
                    on_progress(start + offset + count)
            start += group
            continue
        chunk = tokens[start : start + limit]
        span = ring.reserve(len(chunk))
        if run_chunk(span, chunk, start + limit >= len(tokens)) is False:
            return False
        ring.commit(span, ring.arena.views().mass, anchors=anchors, scored=scored)
        start += len(chunk)
        if on_progress is not None:
            on_progress(start)
    return True


class ForwardPass:
    """What every backend's forward pass does; the members with bodies are defaults that a
    backend overrides where it can do better."""

    # Where a snapshot reads the K/V planes: "mapped" (straight from the arena's views) or
    # "staging" (device memory the CPU reads slowly: read_regions copies them out first).
    snapshot_path: str = "mapped"
    # Whether project_logits works: per-row logits of hidden states (perplexity, eval memory).
    projects_hidden: bool = False
    ring: KVRing  # the conversation's ring, whose arena this pass reads and writes

    def prefill(self, tokens: Sequence[int], *, anchors: bool = False,
                on_hidden: HiddenCallback | None = None,
                should_stop: Callable[[], bool] | None = None,
                on_progress: ProgressCallback | None = None) -> np.ndarray | None:
        raise NotImplementedError

    def decode_one_token(self, token: int) -> np.ndarray:
        raise NotImplementedError

    def project_logits(self, hidden: np.ndarray, out: np.ndarray) -> None:
        """out (R, vocab) = logits of final-normed hidden rows (R, d_model)."""
        raise NotImplementedError(f"{type(self).__name__} does not project hidden rows")

    def read_regions(self, names: Sequence[str],
                     rows: tuple[int, int] | None = None) -> dict[str, np.ndarray]:
        """Host arrays holding the named arena regions as they are now (for a snapshot): the
        arena's own views, unless snapshot_path is "staging". With `rows` (start, stop), the
        K/V caches come back as those slots only, (L, stop - start, kv_dim): what a chain
        segment writes (snapshot/segment.py)."""
        views = self.ring.arena.views()
        out = {name: getattr(views, name) for name in names}
        if rows is not None:
            for name in KV_REGIONS:
                if name in out:
                    out[name] = out[name][:, rows[0]:rows[1]]
        return out


KV_REGIONS = ("k_cache", "v_cache")  # (L, S, kv_dim): the regions `rows` narrows


class Backend(Protocol):
    name: str
    needs_f32_weights: bool
    kv_format: KVFormat  # how the arena keeps the ring's keys and values
    scratch: ScratchPlan | None  # adds the forward pass's own arena regions, if it has any
    features: frozenset[str]  # the architecture FEATURES its forward pass implements

    def arena_allocator(self) -> Allocator | None: ...

    def make_forward(self, model: Model, ring: KVRing) -> ForwardPass: ...

    def shape_problem(self, cfg: ModelConfig) -> str | None:
        """Why this backend cannot run a model of these sizes although it implements its
        features (a shader's width limit), or None."""

    def describe(self) -> dict: ...


def model_problem(backend: Backend, cfg: ModelConfig) -> str | None:
    """Why `backend` cannot run a model of this config, or None."""
    return (backend_problem(cfg.features, cfg.architecture, backend.name, backend.features)
            or backend.shape_problem(cfg))
