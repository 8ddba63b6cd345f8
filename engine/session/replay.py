"""Which stream events belong in the ring, and the tokens a replay feeds it.

A message can be *withdrawn*: a turn cancelled during its prefill (or one that failed after
its message was logged) never finished entering the ring, so the engine appends an assistant
event with `withdraws: <the message's id>` and rebuilds the state without that message. The
stream keeps both lines (it is never rewritten, and a transcript still shows them), but the
ring, a replay and the chat template see neither.

A turn can be *retracted* (undo, regenerate): an event with `retracts: [ids]` takes the listed
messages out the same way, and front ends hide them. A fork's stream begins with a `forked_from`
marker, which is not a message either.

A replay feeds at most a ring's worth of tokens: older ones would only be evicted again, and a
huge message (one a crash interrupted mid-prefill, say) would otherwise cost its whole prefill
at every boot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..conversation import Conversation
from .stream import StreamEvent
from .transcript import Transcript

log = logging.getLogger("channel.engine")
WITHDRAWS = "withdraws"
RETRACTS = "retracts"
IN_REPLY_TO = "in_reply_to"
FORKED_FROM = "forked_from"
ReplayProgress = Callable[[int, int], None]  # (tokens done, tokens total)


def retracted_ids(event: StreamEvent) -> list[str]:
    ids = event.extra.get(RETRACTS)
    if event.role != "assistant" or not isinstance(ids, list):
        return []
    return [i for i in ids if isinstance(i, str)]


def is_withdrawal(event: StreamEvent) -> bool:
    """A withdrawal or a retraction: an event that takes messages back out of the ring."""
    return event.role == "assistant" and (isinstance(event.extra.get(WITHDRAWS), str)
                                          or bool(retracted_ids(event)))


def is_marker(event: StreamEvent) -> bool:
    """Not a message: a fork's `forked_from` line."""
    return event.role == "system" and isinstance(event.extra.get(FORKED_FROM), dict)


def withdrawn_ids(events: Sequence[StreamEvent]) -> set[str]:
    ids: set[str] = set()
    for event in events:
        if is_withdrawal(event):
            withdrawn = event.extra.get(WITHDRAWS)
            ids.update([withdrawn] if isinstance(withdrawn, str) else retracted_ids(event))
    return ids


def reply_target(event: StreamEvent) -> str | None:
    """The id of the message an assistant event answers (`in_reply_to`), if it names one."""
    target = event.extra.get(IN_REPLY_TO)
    return target if event.role == "assistant" and isinstance(target, str) else None


def ring_order(events: Sequence[StreamEvent]) -> list[StreamEvent]:
    """The events in the order the ring takes them in: the stream's, except that a reply
    comes right after the message it answers (`in_reply_to`) and that message's earlier
    replies.

    The two differ when messages queue up: three `channel send`s before the engine answers
    the first are in the stream as three questions, then three answers, while the engine fed
    each question just before its answer. A reply moves back past other messages and
    replies only, never past a line that takes messages out (a withdrawal, a retraction) or
    a fork's marker: the ring took that line in before the reply was written. A stream
    written before replies named their message keeps its order.
    """
    ordered: list[StreamEvent] = []
    for event in events:
        target, at = reply_target(event), len(ordered)
        while target is not None and at > 0:
            before = ordered[at - 1]
            if before.id == target or reply_target(before) == target:
                break
            if is_withdrawal(before) or is_marker(before):
                break
            at -= 1
        else:
            at = len(ordered)  # its message is not before it: the stream's place
        ordered.insert(at, event)
    return ordered


def taken_in(events: Sequence[StreamEvent], withdrawn: set[str]) -> list[StreamEvent]:
    """The events whose tokens belong in the ring, in ring order: all but withdrawn or
    retracted messages, the events that take them out, and markers."""
    return [e for e in ring_order(events)
            if e.id not in withdrawn and not is_withdrawal(e) and not is_marker(e)]


@dataclass
class ReplayPlan:
    anchors: list[int]  # the system prompt's tokens, pinned in the ring
    tokens: list[int]  # the rest, already cut to what the ring holds
    turn_starts: list[int]  # offsets into `tokens` where a user turn begins
    skipped: int  # tokens left out at the front because the ring cannot hold them


def plan_replay(transcript: Transcript, events: Sequence[StreamEvent], first_is_system: bool,
                anchored: int, capacity: int) -> ReplayPlan:
    """Advance `transcript` over `events` and collect the tokens they put in the ring.

    `anchored` is how many anchors the ring already holds and `capacity` its slots: of the
    non-anchor tokens only the last `capacity - anchors` are kept.
    """
    anchors: list[int] = []
    tokens: list[int] = []
    starts: list[int] = []
    for i, event in enumerate(events):
        if i == 0 and first_is_system and event.role == "system":
            anchors = transcript.event_tokens(event, generation_prompt=False)
            continue
        if event.role == "user":
            starts.append(len(tokens))
        answered = i + 1 < len(events) and events[i + 1].role == "assistant"
        tokens += transcript.event_tokens(event, generation_prompt=answered)
    room = max(0, capacity - anchored - len(anchors))
    skipped = max(0, len(tokens) - room)
    # A turn that began in the cut-off part is still a turn: it starts at the first kept token.
    kept_starts = sorted({max(0, s - skipped) for s in starts})
    if skipped and not tokens[skipped:]:
        kept_starts = []
    return ReplayPlan(anchors, tokens[skipped:], kept_starts, skipped)


def replay(conv: Conversation, transcript: Transcript, events: Sequence[StreamEvent],
           progress: ReplayProgress | None, first_is_system: bool) -> tuple[int, int]:
    """Feed events to the ring in bulk: anchors first, then batched prefills. Returns the
    tokens fed and those left out at the front because the ring cannot hold them.
    `progress` may raise to abandon the replay between slices."""
    ring = conv.ring
    plan = plan_replay(transcript, events, first_is_system, ring.n_anchors,
                       conv.policy.max_slots)
    if plan.skipped:
        log.info("replaying the last %d tokens; %d more would not fit the ring",
                 len(plan.tokens), plan.skipped)
    if plan.anchors:
        conv.ingest(plan.anchors, anchors=True)
    clock0 = ring.clock
    for offset in plan.turn_starts:
        ring.mark_turn_start(clock0 + offset)
    # One prefill chunk between progress reports (and chances to abandon a boot): at most a
    # ring's worth is replayed, so the ring's own chunk size gives a few reports at least.
    tokens, step = plan.tokens, conv.policy.prefill_chunk
    for start in range(0, len(tokens), step):
        conv.ingest(tokens[start : start + step])
        if progress is not None:
            progress(min(start + step, len(tokens)), len(tokens))
    return len(plan.anchors) + len(tokens), plan.skipped
