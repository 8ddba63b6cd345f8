"""A check several model families' tests share: decode allocates nothing once a conversation
is ready, through evictions and rebases too (the arena's scratch, `out=` everywhere)."""

from __future__ import annotations

from engine.allocs import measure_allocations
from engine.conversation import Conversation
from engine.state.ring_policy import RingPolicy

SMALL_RING = RingPolicy(max_slots=24, recent_window=4, evict_batch=3, prefill_chunk=5)


def assert_steps_allocate_nothing(conv: Conversation, tokens: list[int]) -> None:
    """After a short prefill and one decode step (which may build what the step needs),
    eight more decode steps of `conv` make no numpy buffer."""
    conv.ingest(tokens[:4])
    stream = iter(tokens * 2)
    conv.forward.decode_one_token(next(stream))
    report = measure_allocations(lambda: conv.forward.decode_one_token(next(stream)), 8)
    assert report.numpy_new_buffers == 0


def assert_decode_allocates_nothing(model, vocab_top: int) -> None:
    """Decode ids below `vocab_top` on a small ring of `model` (its context short enough to
    rebase) until eviction and rebase happen, then measure 120 more steps."""
    conv = Conversation(model, SMALL_RING)
    conv.ingest([5, 6, 7])
    token = iter(range(10**6))

    def step() -> None:
        conv.forward.decode_one_token(4 + next(token) % (vocab_top - 4))

    for _ in range(60):
        step()
    report = measure_allocations(step, repeat=120)
    assert conv.ring.evicted > 0 and conv.ring.rebases > 0
    assert report.numpy_new_buffers == 0 and report.numpy_net_bytes <= 0
