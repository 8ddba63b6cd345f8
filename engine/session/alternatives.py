"""A message's other replies: each regenerate keeps the reply it took back in the stream
(retracted, never removed), so the replies a message has had stay reachable.

Bringing one back is a regenerate that does not sample: the ring rolls back to the end of the
message's prompt, as for any regenerate, and takes in the chosen reply's recorded tokens.
A new assistant event carries them, naming the reply it restores (`restores`), so that a
replay feeds it like any reply and a front end counts it as that reply, not as a new one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .replay import RETRACTS, WITHDRAWS, reply_target
from .stream import StreamEvent
from .undo import last_exchange

if TYPE_CHECKING:
    from .session import Session

RESTORES = "restores"


def reply_origin(event: StreamEvent) -> str:
    """The reply an assistant event is: itself, or the one it restores."""
    restored = event.extra.get(RESTORES)
    return restored if isinstance(restored, str) else event.id


def alternatives(events: list[StreamEvent], user_id: str) -> list[StreamEvent]:
    """The distinct replies message `user_id` has had, oldest first (each as first written)."""
    seen: dict[str, StreamEvent] = {}
    for event in events:
        if (reply_target(event) == user_id and RETRACTS not in event.extra
                and WITHDRAWS not in event.extra):
            seen.setdefault(reply_origin(event), event)
    return list(seen.values())


def chosen_reply(session: Session, reply_id: str) -> StreamEvent:
    """The earlier reply `reply_id` to the conversation's last message, checked so that
    bringing it back cannot fail half way; ValueError, in one line, when it cannot be."""
    events = session.stream.read().events
    user, current = last_exchange(session, events)
    by_origin = {reply_origin(e): e for e in alternatives(events, user.id)}
    chosen = by_origin.get(reply_id)
    if chosen is None:
        raise ValueError(f"{reply_id!r} is not a reply to the last message")
    if reply_id == reply_origin(current):
        raise ValueError("that reply is the one the conversation has now")
    tokens = chosen.extra.get("tokens")
    if chosen.extra.get("model") != session.model.fingerprint or not isinstance(tokens, list) \
            or not all(isinstance(t, int) and 0 <= t < session.model.config.vocab_size
                       for t in tokens):
        raise ValueError("that reply was written by another model; regenerate instead")
    return chosen
