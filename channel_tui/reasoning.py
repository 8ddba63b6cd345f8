"""A thinking model's reply split into its reasoning and its answer, for display only.

Thinking models (Qwen3, Qwen3.5) write their reasoning first, inside <think> … </think>, then
the answer. The transcript folds the reasoning away; the text the app keeps, exports and
sends stays the whole reply, so this module never changes a reply, it only reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

OPEN = "<think>"
CLOSE = "</think>"


@dataclass(frozen=True)
class Reasoned:
    reasoning: str | None  # None: not a thinking reply, shown as it is
    answer: str  # what is shown as the reply (all of it when reasoning is None)
    still_thinking: bool  # the reasoning has not closed (yet, or ever: a reply cut short)

    @property
    def words(self) -> int:
        return len((self.reasoning or "").split())


def _without_partial(text: str, tag: str) -> str:
    """`text` less a tail that may be the start of `tag`: a streamed tag can arrive in pieces
    ('</th', 'ink>'), and its first half is not reasoning to count."""
    for cut in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-cut:]):
            return text[:-cut]
    return text


def split_reasoning(text: str) -> Reasoned:
    """Reasoning and answer of a reply. Only a reply that starts (after whitespace) with
    <think> has reasoning: a tag further on is something the answer talks about."""
    body = text.lstrip()
    if not body.startswith(OPEN):
        return Reasoned(None, text, False)
    body = body[len(OPEN):]
    reasoning, close, answer = body.partition(CLOSE)
    if not close:
        return Reasoned(_without_partial(body, CLOSE).strip(), "", True)
    # The model puts blank lines after </think>; they are not part of the answer.
    return Reasoned(reasoning.strip(), answer.lstrip(), False)


def undecided(text: str) -> bool:
    """While a reply streams: nothing yet says whether it is a thinking reply (it is blank so
    far, or the start of <think>), so nothing of it should be drawn yet."""
    body = text.lstrip()
    return len(body) < len(OPEN) and OPEN.startswith(body)


def copyable(text: str) -> str:
    """What copying a reply copies: its answer, without the reasoning; the reasoning itself
    when there is no answer (the reply was cut off while the model was still thinking)."""
    parts = split_reasoning(text)
    if parts.reasoning is None:
        return text
    return parts.answer or parts.reasoning
