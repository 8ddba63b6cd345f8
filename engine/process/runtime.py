"""Per-session state of the engine process: debounce timer, cancel flag, stream position,
and the compact ring summary that front ends draw."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..model.architecture import CONV, DELTA, WINDOW
from ..session.alternatives import RESTORES
from ..session.replay import WITHDRAWS, is_marker, reply_target, retracted_ids, ring_order
from ..session.session import BootReport, Session
from ..session.stream import StreamEvent
from ..snapshot.snapshotter import SaveResult
from ..state.ring_policy import DEFAULT_EVICT
from ..state.turn_memory import turn_memory

HEAT_LEVELS = 10  # salience is drawn in ten steps: '0'..'9'


@dataclass
class SessionRuntime:
    session: Session
    stream_offset: int = 0  # bytes of the stream already seen; the watcher resumes here
    # Events read past stream_offset but not yet handled: a poll that failed part-way
    # (its answer raised) leaves the rest here for the next poll, not lost until a rebuild.
    unhandled: list[StreamEvent] = field(default_factory=list)
    cancel: threading.Event = field(default_factory=threading.Event)
    turn_active: bool = False
    snapshot_state: str = "unchanged"
    _debounce: threading.Timer | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.session.name

    def arm_debounce(self, delay_s: float, fire: Callable[[], None]) -> None:
        """(Re)start the quiescence timer: `fire` runs once, delay_s after the last call."""
        self.disarm_debounce()
        timer = threading.Timer(delay_s, fire)
        timer.daemon = True
        timer.name = f"debounce-{self.name}"
        self._debounce = timer
        timer.start()

    def disarm_debounce(self) -> None:
        if self._debounce is not None:
            self._debounce.cancel()
            self._debounce = None

    def stats(self) -> dict:
        """This session's part of a `stats` event. Read-only: it may run beside a turn."""
        snap = self.session.snapshots
        return {
            "ring": ring_summary(self.session), "turn_active": self.turn_active,
            "snapshot": {"path": str(snap.path), "state": self.snapshot_state,
                         "bytes": snap.disk_bytes(),  # the base and its segments
                         "segments": snap.head.seq if snap.head is not None else 0,
                         "saved_clock": snap.last_clock, "busy": snap.busy,
                         # 'mapped': written straight from the arena views; 'staging':
                         # copied out of slow device memory first (a GPU's BAR window)
                         "io_path": self.session.conversation.forward.snapshot_path},
        }


def ring_summary(session: Session) -> dict:
    """Occupancy, anchors, clock and one character per slot for the ring view.

    cells[i] is '.' for a free slot, 'A'..'J' for an anchor, 'a'..'j' for a slot in the recent
    window and '0'..'9' for any other live slot; the letter or digit is its salience decile
    relative to the most salient unpinned slot. `turns` says how much of each recorded turn
    the ring still holds (engine/state/turn_memory.py), for the "partly forgotten" marks.
    """
    conv = session.conversation
    ring, v = conv.ring, conv.arena.views()
    n, anchors, capacity = ring.n_active, ring.n_anchors, conv.policy.max_slots
    recent_from = max(anchors, n - conv.policy.recent_window)
    salience = v.slot_salience[:n]
    peak = float(salience[anchors:].max()) if n > anchors else 0.0
    levels = np.zeros(n, np.int64)
    if peak > 0:
        scaled = np.sqrt(np.clip(salience / peak, 0.0, 1.0))  # sqrt: spread the long tail
        levels = np.minimum((scaled * HEAT_LEVELS).astype(np.int64), HEAT_LEVELS - 1)
    chars = []
    for i, level in enumerate(levels.tolist()):
        if i < anchors:
            chars.append(chr(ord("A") + level))
        elif i >= recent_from:
            chars.append(chr(ord("a") + level))
        else:
            chars.append(str(level))
    turns, older_forgotten = turn_memory(ring)
    return {
        "active": n, "capacity": capacity, "anchors": anchors, "clock": ring.clock,
        "next_pos": ring.next_pos, "evicted": ring.evicted, "rebases": ring.rebases,
        "recent_window": conv.policy.recent_window, "policy": conv.policy.evict,
        "policy_is_default": conv.policy.evict == DEFAULT_EVICT,
        "cells": "".join(chars) + "." * (capacity - n),
        # Oldest first: [tokens, kept] per recorded turn, and where its oldest kept token is.
        "turns": [[t.tokens, t.kept] for t in turns],
        "turn_slots": [t.first_slot for t in turns if t.first_slot is not None],
        "older_turns_forgotten": older_forgotten,
    }


def boot_fields(report: BootReport) -> dict:
    return {
        "kind": report.kind, "reason": report.reason,
        "restore_ms": round(report.restore_ms, 3), "replay_ms": round(report.replay_ms, 3),
        "replayed_events": report.replayed_events, "replayed_tokens": report.replayed_tokens,
        "restored_slots": report.restored_slots, "snapshot_bytes": report.snapshot_bytes,
        "snapshot_segments": report.snapshot_segments,
        "phases_ms": {k: round(v, 3) for k, v in report.phases_ms.items()},
        "warnings": report.warnings,
    }


def ring_size_fields(conv) -> dict:
    """How large the session's ring is: its slots, the model's trained context that bounds
    them, and the bytes its keys and values take (RingPolicy.for_model)."""
    views, cfg = conv.arena.views(), conv.model.config
    fields = {"ring_slots": conv.policy.max_slots, "context_length": cfg.context_length,
              "kv_bytes": int(views.k_cache.nbytes + views.v_cache.nbytes)}
    if cfg.hybrid:  # what each kind of layer keeps (docs/memory.md)
        fields["layer_state"] = {
            "ring_layers": cfg.n_full, "window_layers": len(cfg.layers_of(WINDOW)),
            "window": cfg.window, "conv_layers": len(cfg.layers_of(CONV)),
            "delta_layers": len(cfg.layers_of(DELTA)),
            "plane_bytes": sum(int(getattr(views, name).nbytes) for name in conv.ring.planes)}
    return fields


def save_fields(result: SaveResult) -> dict:
    fields = {"status": result.status.name.lower(), "bytes": result.bytes,
              "ms": round(result.ms, 3), "clock": result.clock, "kind": result.kind}
    if result.error:
        fields["error"] = result.error
    return fields


# What a reply's event keeps of how it was made, passed on so a front end can show it after a
# restart: its speed figures and the seed it was sampled with.
REPLY_FIGURES = ("ttft_ms", "prefill_tok_s", "decode_tok_s", "seed")


def transcript_fields(session: Session) -> list[dict]:
    """Every event of the stream, as front ends show them (withdrawn messages included).
    `hidden` marks what an undo took back, the retractions themselves and a fork's marker:
    the stream keeps them, a front end leaves them out."""
    events = ring_order(session.stream.read().events)  # each reply under its message
    retracted = {i for e in events for i in retracted_ids(e)}
    return [{"id": e.id, "role": e.role, "content": e.content, "ts": e.ts,
             "stop": e.extra.get("stop"), "in_reply_to": reply_target(e),
             "hidden": e.id in retracted or bool(retracted_ids(e)) or is_marker(e),
             **{k: e.extra[k] for k in REPLY_FIGURES if k in e.extra},
             **({"withdraws": e.extra[WITHDRAWS]} if e.extra.get(WITHDRAWS) else {}),
             **({RESTORES: e.extra[RESTORES]} if isinstance(e.extra.get(RESTORES), str) else {})}
            for e in events]
