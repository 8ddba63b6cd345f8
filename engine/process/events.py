"""The shapes of the engine's events (docs/protocol.md, "Events"), for both sides.

TypedDicts, so a client may annotate what it reads; nothing here is enforced at run time.
Every event may also carry `req` (the id of the request that caused it) and `session`.
EVENT_TYPES lists every type the engine emits: a front end's handler table is checked against
it in the tests. Adding an event is one class here and one entry in EVENT_TYPES.
"""

from __future__ import annotations

from typing import Any, TypedDict


class Event(TypedDict, total=False):
    type: str
    req: Any
    session: str


class Ready(Event, total=False):  # also `hello`
    protocol: int
    model: str  # the display name, built from the GGUF's metadata
    model_path: str
    fingerprint: str
    backend: str
    backend_info: dict
    data_dir: str
    sessions: list[str]


class TranscriptEntry(TypedDict, total=False):
    id: str
    role: str
    content: str
    ts: str
    stop: str | None
    in_reply_to: str | None  # a reply: the message it answers (listed right after it)
    hidden: bool  # retracted, or a retraction or fork marker: front ends leave it out
    # A reply, where its event has them: time to first token, prompt and decode speed, and
    # the seed it was sampled with.
    ttft_ms: float
    prefill_tok_s: float
    decode_tok_s: float
    seed: int
    withdraws: str  # a withdrawal: the message it took back out (stopped while being read)


class Booted(Event, total=False):  # also `restored`
    kind: str
    reason: str
    restore_ms: float
    replay_ms: float
    replayed_events: int
    replayed_tokens: int
    restored_slots: int
    snapshot_bytes: int  # the base and the segments applied
    snapshot_segments: int  # segments applied after the base (docs/snapshot.md "Chains")
    phases_ms: dict[str, float]
    warnings: list[str]
    transcript: list[TranscriptEntry]
    model: str  # the session's model (a session stays on the model it was made with)
    model_path: str
    fingerprint: str
    ring_slots: int  # the ring's size: at most the model's trained context
    context_length: int
    kv_bytes: int


class Progress(Event, total=False):  # `replay_progress` (an open) and `prefill_progress`
    done: int  # tokens read so far
    total: int


class TurnStarted(Event, total=False):
    user_event_id: str


class Token(Event, total=False):
    text: str


class EndOfTurn(Event, total=False):
    reply: str
    stop: str
    event_id: str
    prompt_tokens: int
    decode_tokens: int
    ttft_ms: float  # time to first token: reading the message, then the first token
    prefill_tok_s: float
    decode_tok_s: float
    seed: int  # the seed the reply was sampled with (absent for a greedy reply)
    clock: int
    withdraws: str  # the message was stopped while being read and taken back out: its id


class Undone(Event, total=False):
    method: str  # "rollback" (nothing re-encoded) or "replay" (with `reason`)
    reason: str
    retracted: list[str]  # the stream ids taken back out
    dropped_slots: int
    ms: float
    previous_seed: int  # a regenerate: the seed of the reply it took back, if sampled
    transcript: list[TranscriptEntry]


class Forked(Event, total=False):
    new: str
    events: int
    snapshot_bytes: int
    system_changed: bool  # it starts from another system prompt: its first open replays
    turn: int | None  # it continues from this turn of the source


class RewindPlanned(Event, total=False):  # `rewind_plan`, and the first fields of `rewound`
    turn: int  # the turn the session continues from (0: the system prompt alone)
    turns: int  # the turns it has before the rewind
    kind: str  # "warm": a kept state and a short replay; "replay": the whole stream again
    link: str  # the kept state, in words; "" for a replay
    replay_events: int
    retracted: list[str]  # the ids taken back
    text: str  # all of it in one line, for a confirmation


class Rewound(RewindPlanned, total=False):
    method: str  # what the rebuild did: "warm" or "cold"
    ms: float
    transcript: list[TranscriptEntry]


class Models(Event, total=False):
    models: list[dict]  # the catalog's entries (docs/models.md, "Finding models")


class Error(Event, total=False):
    code: str
    message: str
    fatal: bool


EVENT_TYPES = frozenset({
    "ready", "hello", "progress", "booted", "restored", "replay_progress", "turn_started",
    "prefill_progress",
    "token", "end_of_turn", "ring", "snapshot", "stream_event", "warning", "stats",
    "boot_compare", "cancelling", "closed", "bye", "error", "undone", "forked", "models",
    "rewind_plan", "rewound",
})
