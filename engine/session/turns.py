"""The points of a turn a session keeps, so that undo and regenerate can roll back to them.

A turn has two: before the user's prompt and after it (with the logits there). A pending turn
is a message in the stream waiting for its answer. Both session.py (which records them) and
undo.py (which rolls back to them) read these types from here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..state.ring import RingMark
from ..state.sampling import MAX_REPLY_TOKENS
from .stream import StreamEvent
from .transcript import TranscriptMark

MAX_TOKENS = "max_tokens"  # on a user event: the reply length its sender asked for


@dataclass(frozen=True)
class TurnPoint:
    ring: RingMark
    transcript: TranscriptMark | None  # None: not known (an undo past it must replay)
    logits: np.ndarray | None = None  # the next-token logits at this point


@dataclass(frozen=True)
class LastTurn:
    user_id: str
    reply_id: str
    before: TurnPoint  # before the user's prompt
    prompted: TurnPoint  # after the prompt, before the reply
    clock: int  # the ring's clock when the reply was in


@dataclass(frozen=True)
class PendingTurn:
    """A user message that is in the stream and its prompt tokens, ready to be answered."""

    event: StreamEvent
    prompt: list[int]
    awaiting_before: bool = False  # the transcript's state before this message's prompt
    # The transcript before this message's prompt (None when unknown: a pending message
    # found at boot), so that an undo can rewind it.
    transcript_before: TranscriptMark | None = None
    # Set when the ring already holds the prompt (a regenerate rolled back to it): the
    # point before the prompt, kept from the turn that is being regenerated.
    prefilled: TurnPoint | None = None
    max_tokens: int | None = None  # what the message's sender asked for, if it said
    # A regenerate: the seed of the reply it took back, so that the new one draws another.
    retried_seed: int | None = None


def asked_max_tokens(event: StreamEvent) -> int | None:
    """The reply length a user event's sender asked for (`max_tokens`), if a valid one."""
    asked = event.extra.get(MAX_TOKENS)
    ok = isinstance(asked, int) and not isinstance(asked, bool) and 0 < asked <= MAX_REPLY_TOKENS
    return asked if ok else None
