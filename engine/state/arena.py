"""One conversation's state arena: a single 64-byte-aligned allocation, seen through views.

Everything numerical a conversation owns lives here: the K/V ring and its per-slot metadata
(saved in snapshots) and every scratch buffer the forward pass writes into (never saved).
Views are rebuilt, and the generation bumped, whenever the arena is reset or restored, so a
compute pass holding the old views fails its check instead of reading state it did not expect.
"""

from __future__ import annotations

import contextlib
import mmap
import weakref
from collections.abc import Callable

import numpy as np

from ..align import ALIGN, align_up
from ..errors import LayoutError, StaleViewError
from ..model.architecture import CONV, DELTA, WINDOW
from ..model.config import ModelConfig
from .kv_format import REFERENCE, KVFormat
from .layout import ArenaLayout
from .ring_policy import RingPolicy

Allocator = Callable[[int], np.ndarray]
ScratchPlan = Callable[[ArenaLayout, ModelConfig, RingPolicy], None]  # adds scratch regions

# ring_counters slots
N_ACTIVE, N_ANCHORS, CLOCK, NEXT_POS, TOTAL_INGESTED, REBASES, EVICTED, TURNS = range(8)
MAX_TURN_BOUNDARIES = 128  # the snapshot header keeps this many turn starts
SAMPLER_WORDS = 6  # PCG64: state hi/lo, inc hi/lo, has_uint32, uinteger

# Regions that make up the conversation's persistent state; everything else is scratch.
STATE_REGIONS = (
    "k_cache", "v_cache", "slot_clock", "slot_pos", "slot_active", "slot_salience",
    "ring_counters", "turn_starts", "sampler_state",
)
# The per-layer planes of layers that are not in the ring (present only where a model has
# such layers). They follow the token stream, not the ring's policy: see add_layer_planes.
LAYER_PLANES = ("kw_cache", "vw_cache", "conv_state", "delta_conv", "delta_state")


def add_value_plane(lay: ArenaLayout, name: str, kv: KVFormat, planes: int, rows: int,
                    kv_dim: int) -> None:
    """`planes` planes of `rows` values each, as the backend's format keeps values: by slot
    (planes, rows, kv_dim), or by dimension, stored (planes, kv_dim, rows) and seen as the
    former (kv_format.py)."""
    if kv.values_by_dimension:
        lay.add(name, kv.value_dtype, (planes, kv_dim, rows), view_axes=(0, 2, 1))
    else:
        lay.add(name, kv.value_dtype, (planes, rows, kv_dim))


def add_layer_planes(lay: ArenaLayout, cfg: ModelConfig, kv: KVFormat) -> None:
    """The state of layers outside the ring, one plane per layer of each kind.

    WINDOW layers keep the newest `cfg.window` tokens' keys and values in a circular plane
    (in the ring's format `kv`): the token the ring's clock stamped c (1, 2, ...) sits in row
    (c - 1) % window, its key rotated (with the window's RoPE base) to the same position as
    the ring's layers gave it.
    CONV layers keep their short convolution's carry: the last conv_kernel - 1 inputs,
    oldest first. DELTA layers keep their convolution's carry (the last conv_kernel - 1 rows
    of q | k | v, oldest first) and their delta-rule state: per value head a head x head
    matrix, transposed (value dim, then key dim, as ggml_gated_delta_net keeps it), in the
    GGUF's head order. None is evicted or reordered;
    a rebase re-rotates the window's keys and touches nothing else.
    """
    n_window, n_conv = len(cfg.layers_of(WINDOW)), len(cfg.layers_of(CONV))
    n_delta = len(cfg.layers_of(DELTA))
    if n_window:
        lay.add("kw_cache", kv.key_dtype, (n_window, cfg.window, cfg.kv_dim))
        add_value_plane(lay, "vw_cache", kv, n_window, cfg.window, cfg.kv_dim)
    if n_conv:
        lay.add("conv_state", np.float32, (n_conv, cfg.conv_kernel - 1, cfg.d_model))
    if n_delta:
        hd = cfg.delta_head_dim
        lay.add("delta_conv", np.float32, (n_delta, cfg.conv_kernel - 1, cfg.delta_conv_dim))
        lay.add("delta_state", np.float32, (n_delta, cfg.delta_v_heads, hd, hd))


def conversation_layout(cfg: ModelConfig, policy: RingPolicy, kv: KVFormat = REFERENCE,
                        scratch: ScratchPlan | None = None) -> ArenaLayout:
    """The arena layout for one conversation of `cfg` under `policy`, sealed. The ring's keys
    and values are kept as the backend's `kv` format says (f16 halves what attention reads per
    token where the backend computes in it); everything else is f32. `scratch` adds the
    regions a backend's own forward pass works in (the numpy backend's; a backend with device
    memory needs none)."""
    if not 0 < policy.max_slots <= cfg.context_length:
        raise LayoutError(
            f"ring of {policy.max_slots} slots must be between 1 and the model's context "
            f"length {cfg.context_length}"
        )
    L, S, C = cfg.n_full, policy.max_slots, policy.prefill_chunk
    KVH, d, V, half = cfg.n_kv_heads, cfg.d_model, cfg.vocab_size, cfg.head_dim // 2
    f32, lay = np.float32, ArenaLayout()

    # Persistent ring state. Slots [0, n_active) are live, anchors first, oldest to newest.
    # Plane j is the j-th FULL layer's (cfg.layers_of(FULL)[j]): every layer in most models.
    lay.add("k_cache", kv.key_dtype, (L, S, cfg.kv_dim))  # keys, RoPE applied at slot_pos
    add_value_plane(lay, "v_cache", kv, L, S, cfg.kv_dim)
    add_layer_planes(lay, cfg, kv)
    lay.add("slot_clock", np.uint64, (S,))  # ingest clock of each slot's token
    lay.add("slot_pos", np.int32, (S,))  # RoPE position the key was rotated to
    lay.add("slot_active", np.uint8, (S,))
    lay.add("slot_salience", f32, (S,))  # decayed attention mass per layer*head
    lay.add("ring_counters", np.uint64, (8,))
    lay.add("turn_starts", np.uint64, (MAX_TURN_BOUNDARIES,))  # circular, clock of turn start
    lay.add("sampler_state", np.uint64, (SAMPLER_WORDS,))

    # Scratch every backend shares: outputs the ring and sampler read, the prefill's causal
    # mask and its final-normed hidden rows (perplexity).
    lay.add("logits", f32, (V,))
    lay.add("mass", f32, (S,))  # attention mass gathered over one pass, per slot
    lay.add("p_causal", f32, (C, C))  # constant: 0 on and below the diagonal, -inf above
    lay.add("p_xn", f32, (C, d))  # final-normed hidden rows of a prefill chunk

    # Sampler scratch (sampler.py, sampler_stages.py): the chain works over the whole
    # vocabulary, then over a candidate list sorted by logit, without allocating.
    lay.add("sample_logits", f32, (V,))  # the logits the chain edits (penalties, DRY)
    lay.add("sample_keys", np.uint64, (V,))  # sort keys: order bits << 32 | index
    lay.add("sample_bits", np.uint32, (V,))  # the order bits being built
    lay.add("vocab_ids", np.uint64, (V,))  # constant: 0, 1, ..., V-1
    lay.add("cand_logit", f32, (V,))  # candidates, best first
    lay.add("cand_id", np.int64, (V,))  # their token ids
    lay.add("cand_p", f32, (V,))  # their probabilities (softmax of cand_logit)
    lay.add("cand_cum", f32, (V,))  # cumulative probabilities
    lay.add("cand_mask", np.bool_, (V,))
    lay.add("spare_logit", f32, (V,))  # where typical-p regathers the candidates it keeps
    lay.add("spare_id", np.int64, (V,))

    # Ring maintenance scratch: eviction and rebase never allocate either.
    lay.add("evict_key", f32, (S,))
    lay.add("evict_sorted", f32, (S,))
    lay.add("evict_mask", np.bool_, (S,))
    lay.add("keep_mask", np.bool_, (S,))
    lay.add("tie_rank", np.int64, (S,))
    lay.add("slot_index", np.int32, (S,))  # constant: 0, 1, ..., S-1
    R = max(S, cfg.window)  # a rebase rotates the ring's live slots, then each window plane
    lay.add("compact_staging", f32, (R, cfg.kv_dim))
    lay.add("rebase_angle", np.float64, (S, half))
    lay.add("rebase_cos", f32, (S, 1, half))
    lay.add("rebase_sin", f32, (S, 1, half))
    lay.add("rebase_a", f32, (R, KVH, half))
    lay.add("rebase_b", f32, (R, KVH, half))
    if scratch is not None:
        scratch(lay, cfg, policy)
    return lay.seal()


PAGE = 4096


def anonymous_memory(nbytes: int) -> np.ndarray:
    """Zeroed anonymous memory, backed by huge pages where the kernel allows, and faulted in
    now. A first-touch fault per 4 KiB page costs ~0.5 s for a 4096-slot arena on these VMs;
    paying it here, before the conversation is ready, keeps it out of restores and decodes."""
    mapping = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        with contextlib.suppress(OSError):
            mapping.madvise(mmap.MADV_HUGEPAGE)
    memory = np.frombuffer(mapping, np.uint8)
    memory[::PAGE] = 0  # one write per page: the kernel supplies it (zeroed) now
    return memory


class ArenaViews:
    """Typed views of every region, stamped with the arena generation they were made for."""

    def __init__(self, arena: StateArena, generation: int, views: dict[str, np.ndarray]):
        # A weak reference: the arena holds its current views, and a strong one back would
        # make a cycle that keeps a dropped conversation's whole arena (hundreds of MB) alive
        # until the cyclic collector happens to run.
        self._arena = weakref.ref(arena)
        self.generation = generation
        self.__dict__.update(views)

    def check(self) -> ArenaViews:
        """Raise StaleViewError unless these views are still the arena's current ones."""
        arena = self._arena()
        if arena is None:
            raise StaleViewError(f"arena views of generation {self.generation} used after "
                                 "the arena was freed")
        if self.generation != arena.generation:
            raise StaleViewError(
                f"arena views of generation {self.generation} used after the arena moved to "
                f"generation {arena.generation} (reset or restore)"
            )
        return self


class StateArena:
    """Owns the one payload allocation of a conversation."""

    def __init__(self, layout: ArenaLayout, allocate: Allocator | None = None):
        """`allocate(nbytes)` supplies the zeroed payload as a writable uint8 array; the
        default is anonymous memory. A GPU backend passes one that maps device memory."""
        if not layout.sealed:
            raise LayoutError("an arena needs a sealed layout")
        self.layout = layout
        # The one numerical payload allocation; over-allocated so its base can be aligned.
        size = layout.total_bytes + ALIGN
        self._buffer = (allocate or anonymous_memory)(size)
        if self._buffer.dtype != np.uint8 or self._buffer.nbytes < size:
            raise LayoutError(f"arena allocator returned {self._buffer.nbytes} bytes, need {size}")
        address = self._buffer.ctypes.data
        base = align_up(address) - address
        self._bytes = self._buffer[base : base + layout.total_bytes]
        self.generation = 0
        self._views = self._make_views()
        self._init_constants()

    @property
    def nbytes(self) -> int:
        return self.layout.total_bytes

    @property
    def base_address(self) -> int:
        return self._bytes.ctypes.data

    def views(self) -> ArenaViews:
        return self._views

    def region_bytes(self, name: str) -> np.ndarray:
        """The raw bytes of one region (uint8, writable), for snapshot I/O."""
        r = self.layout[name]
        return self._bytes[r.offset : r.end]

    def invalidate(self) -> ArenaViews:
        """Bump the generation after the state changed wholesale (restore); old views go stale."""
        self.generation += 1
        self._views = self._make_views()
        return self._views

    def reset(self) -> ArenaViews:
        """Forget the conversation: zero the persistent regions and the layer planes (a conv
        carry is read from its first token on; stale window rows are masked by their clocks
        anyway) and invalidate views."""
        for name in STATE_REGIONS + LAYER_PLANES:
            if name in self.layout:
                self.region_bytes(name)[:] = 0
        return self.invalidate()

    def _make_views(self) -> ArenaViews:
        views = {}
        for r in self.layout.regions:
            view = self._bytes[r.offset : r.end].view(r.dtype).reshape(r.shape)
            views[r.name] = view if r.view_axes is None else view.transpose(r.view_axes)
        return ArenaViews(self, self.generation, views)

    def _init_constants(self) -> None:
        causal = self._views.p_causal
        causal[:] = 0.0
        causal[np.triu_indices(causal.shape[0], k=1)] = -np.inf
        self._views.slot_index[:] = np.arange(self._views.slot_index.shape[0])
        self._views.vocab_ids[:] = np.arange(self._views.vocab_ids.shape[0], dtype=np.uint64)
