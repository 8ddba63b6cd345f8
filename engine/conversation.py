"""One conversation's numerical life: its arena, ring, forward pass and sampler.

This is token-level: it knows nothing about roles, templates or files (see engine/session/).
`ingest` is the prefill, `generate` the decode loop, in the shape of gpt-fast's
prefill / decode_one_token / decode_n_tokens(callback).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .backends.base import Backend, HiddenCallback, ProgressCallback
from .backends.numpy.backend import NumpyBackend
from .model.model import Model
from .state.arena import StateArena, conversation_layout
from .state.loop_guard import LoopGuard
from .state.ring import KVRing
from .state.ring_policy import RingPolicy
from .state.sampler import Sampler, SamplingSettings

TokenCallback = Callable[[int], None]
StopCheck = Callable[[], bool]


@dataclass(frozen=True)
class Generation:
    ids: list[int]  # emitted tokens, without the stop token
    stop: str  # "eot", "max_tokens", "repetition" (the loop guard) or "cancelled"
    decode_s: float
    seed: int | None = None  # the seed the reply was sampled with; None: greedy
    first_token_s: float = 0.0  # from the start of decoding to the first token (or the stop)

    @property
    def tok_s(self) -> float:
        return len(self.ids) / self.decode_s if self.decode_s > 0 else 0.0


class Conversation:
    def __init__(self, model: Model, policy: RingPolicy | None = None, seed: int = 0,
                 backend: Backend | None = None):
        self.model = model
        self.backend = backend or NumpyBackend()
        self.policy = policy or RingPolicy.for_model(
            model.config, model.config.kv_bytes_per_slot(*self.backend.kv_format.slot_item_bytes))
        self.layout = conversation_layout(model.config, self.policy, self.backend.kv_format,
                                          self.backend.scratch)
        self.arena = StateArena(self.layout, self.backend.arena_allocator())
        self.ring = KVRing(self.arena, model.config, self.policy, model.rope, model.rope_window)
        self.forward = self.backend.make_forward(model, self.ring)
        self.sampler = Sampler(seed, model.tokenizer)
        self.sampler.save_state(self.arena.views())
        self.loop_guard = LoopGuard(model.tokenizer)
        self.last_logits: np.ndarray | None = None  # what the last pass returned

    def reset(self) -> None:
        """Forget everything; old arena views go stale."""
        self.arena.reset()
        self.sampler.save_state(self.arena.views())
        self.last_logits = None

    def ingest(self, tokens: Sequence[int], *, anchors: bool = False,
               on_hidden: HiddenCallback | None = None,
               should_stop: StopCheck | None = None,
               on_progress: ProgressCallback | None = None) -> np.ndarray | None:
        """Prefill `tokens`; return the next-token logits, or None if stopped early (the
        ring may then hold part of a chunk: the caller rebuilds it). `on_progress` gets the
        tokens read so far after each prefill chunk."""
        self.model.guard_files()  # a truncated mapping raises here, not SIGBUS in the pass
        logits = self.forward.prefill(tokens, anchors=anchors, on_hidden=on_hidden,
                                      should_stop=should_stop, on_progress=on_progress)
        if logits is not None:
            self.last_logits = logits
        return logits

    def generate(self, settings: SamplingSettings, max_tokens: int,
                 stop_ids: frozenset[int], on_token: TokenCallback | None = None,
                 should_stop: StopCheck | None = None) -> Generation:
        """Sample from the current logits; decode until a stop token, max_tokens, the loop
        guard (the reply repeats one cycle: state/loop_guard.py) or a stop.

        Every emitted token is ingested, so the ring always holds exactly what was emitted;
        the stop token itself is not (the caller closes the turn as its template says).
        """
        views = self.arena.views()
        seed = self.sampler.begin_reply(views, settings)
        guard = self.loop_guard
        guard.reset()
        ids: list[int] = []
        stop = "max_tokens"
        t0 = time.perf_counter()
        first_token_s = 0.0
        if max_tokens > 0:
            token = self.sampler.sample(views, settings, self.last_logits)
            first_token_s = time.perf_counter() - t0
            while True:
                if token in stop_ids:
                    stop = "eot"
                    break
                ids.append(token)
                self.sampler.accept(token)
                if on_token is not None:
                    on_token(token)
                self.model.guard_files()  # a file truncated mid-reply: an error, not SIGBUS
                self.last_logits = self.forward.decode_one_token(token)
                if len(ids) >= max_tokens:
                    break
                if guard.push(token):
                    stop = "repetition"
                    break
                if should_stop is not None and should_stop():
                    stop = "cancelled"
                    break
                token = self.sampler.sample(views, settings, self.last_logits)
        return Generation(ids, stop, time.perf_counter() - t0, seed, first_token_s)
