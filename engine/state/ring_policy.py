"""RingPolicy: how a conversation's K/V ring is sized and which slots a full ring forgets.

It sits beside the eviction policies that act on it (evict_policy.py); ring.py applies both.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model.config import ModelConfig

# K/V bytes a conversation's ring may take by default: SmolLM2, Qwen2.5-7B and Llama-3-8B all
# get the full 4096 slots (35, 86 and 197 KB per slot in f32); a 70B model gets 2048.
DEFAULT_RING_BUDGET = 1 << 30
RING_GRANULE = 256  # budget-limited rings are a whole number of eviction batches
# How a full ring picks what to forget (docs/memory.md): EMA-decayed attention mass, the
# oldest slots (StreamingLLM), accumulated mass (H2O), the latest query's attention (TOVA),
# and decayed mass with short turns (a stated fact, an instruction) kept whole.
EVICT_POLICIES = ("salience", "window", "h2o", "tova", "turns")
DEFAULT_EVICT = "turns"  # what `channel eval memory` measured best (docs/memory.md)


@dataclass(frozen=True)
class RingPolicy:
    """How a conversation's K/V ring is sized and how it forgets.

    Slots are kept compacted in ingest order: anchors first, then the rest oldest to newest.
    Eviction removes whole batches so that it is rare, and rebase re-indexes positions before
    they leave the model's trained range.
    """

    max_slots: int = 4096
    recent_window: int = 256  # newest slots, never evicted
    evict_batch: int = 256  # slots freed per eviction, so eviction runs rarely
    salience_decay: float = 0.995  # per ingested token; keeps age from buying salience
    prefill_chunk: int = 256  # rows per batched prefill pass; sizes the prefill scratch
    evict: str = DEFAULT_EVICT  # which slots a full ring forgets: one of EVICT_POLICIES
    short_turn: int = 48  # `turns`: a turn (message + reply) of at most this many tokens...
    short_turn_share: float = 0.5  # ...is kept whole, while such turns fill at most this share

    def __post_init__(self) -> None:
        if self.evict not in EVICT_POLICIES:
            raise ValueError(
                f"unknown eviction policy {self.evict!r} (choose from {', '.join(EVICT_POLICIES)})")
        if self.max_slots < 2:
            raise ValueError(f"a ring needs at least 2 slots, got {self.max_slots}")
        if not 0 <= self.recent_window < self.max_slots:
            raise ValueError(
                f"recent window {self.recent_window} must be smaller than the ring "
                f"({self.max_slots} slots)"
            )
        if self.evict_batch < 1 or self.prefill_chunk < 1:
            raise ValueError("evict_batch and prefill_chunk must be at least 1")
        if not 0.0 <= self.short_turn_share < 1.0 or self.short_turn < 0:
            raise ValueError(f"short_turn_share must be in [0, 1) and short_turn at least 0, "
                             f"got {self.short_turn_share} and {self.short_turn}")
        if not 0.0 < self.salience_decay <= 1.0:
            raise ValueError(f"salience_decay must be in (0, 1], got {self.salience_decay}")

    def scaled_to(self, max_slots: int) -> RingPolicy:
        """The default policy shrunk proportionally for a smaller ring."""
        if max_slots >= self.max_slots:
            return self
        return RingPolicy(
            max_slots=max_slots,
            recent_window=min(self.recent_window, max(1, max_slots // 8)),
            evict_batch=min(self.evict_batch, max(1, max_slots // 16)),
            salience_decay=self.salience_decay,
            short_turn=self.short_turn,
            short_turn_share=self.short_turn_share,
            prefill_chunk=min(self.prefill_chunk, max(1, max_slots // 4)),
            evict=self.evict,
        )

    @staticmethod
    def for_model(cfg: ModelConfig, slot_bytes: int | None = None, slots: int | None = None,
                  budget_bytes: int = DEFAULT_RING_BUDGET,
                  evict: str = DEFAULT_EVICT) -> RingPolicy:
        """The ring for `cfg`: `slots` if asked for (at most the trained context), else the
        default 4096, shrunk to the model's context and to what `budget_bytes` of K/V holds
        at `slot_bytes` per slot (default: f32 keys and values); it forgets by `evict`."""
        base = RingPolicy(evict=evict)
        if slots is not None:
            if slots > cfg.context_length:
                raise ValueError(
                    f"a ring of {slots} slots is longer than the model's trained context "
                    f"({cfg.context_length} tokens)")
            if cfg.sliding_window and slots > cfg.sliding_window:
                raise ValueError(
                    f"a ring of {slots} slots is longer than the model's attention window "
                    f"({cfg.sliding_window} tokens)")
            return RingPolicy(max_slots=slots, evict=evict) if slots >= 4096 \
                else base.scaled_to(slots)
        per_slot = slot_bytes or cfg.kv_bytes_per_slot(4, 4)
        fits = max(RING_GRANULE, budget_bytes // per_slot // RING_GRANULE * RING_GRANULE)
        longest = min(cfg.context_length, cfg.sliding_window or cfg.context_length)
        return base.scaled_to(min(RingPolicy.max_slots, longest, fits))

    def as_dict(self) -> dict:
        return {
            "max_slots": self.max_slots,
            "recent_window": self.recent_window,
            "evict_batch": self.evict_batch,
            "salience_decay": self.salience_decay,
            "prefill_chunk": self.prefill_chunk,
            "evict": self.evict,
            "short_turn": self.short_turn,
            "short_turn_share": self.short_turn_share,
        }
