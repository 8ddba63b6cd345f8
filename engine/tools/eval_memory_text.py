"""The natural long text the memory evaluation measures perplexity on, as a conversation.

Template conversations (eval_memory_facts.py) are right for fact recall and wrong for
perplexity: their filler is drawn from small pools, so a model with the whole history in view
learns the pools in context and predicts the later filler far better than any ring that
forgot the earlier filler can (docs/memory.md). Perplexity is measured instead on a real text
that does not repeat itself: the GPL-3 and GPL-2 licences (shipped verbatim in data/), read as
a conversation whose messages are consecutive paragraphs, user and assistant in turn.
"""

from __future__ import annotations

from importlib import resources

from .eval_memory_facts import Dialogue

SYSTEM_PROMPT = "You are a helpful assistant."


def licence_text() -> str:
    """GPL-3 followed by GPL-2, verbatim."""
    return resources.files(__package__).joinpath("data/licences.txt").read_text("utf-8")


def licence_dialogue(count_tokens, tokens: int, message_tokens: int = 160) -> Dialogue:
    """The licences' first paragraphs as alternating user and assistant messages of about
    `message_tokens` tokens each, until about `tokens` tokens are used. `count_tokens(str)`
    measures a piece of text in the model's tokens."""
    messages: list[dict] = [{"role": "system", "content": SYSTEM_PROMPT}]
    current: list[str] = []
    size = used = 0
    for paragraph in (p.strip() for p in licence_text().split("\n\n")):
        if not paragraph:
            continue
        current.append(paragraph)
        size += count_tokens(paragraph)
        if size >= message_tokens:
            role = "user" if len(messages) % 2 else "assistant"
            messages.append({"role": role, "content": "\n\n".join(current)})
            used += size
            current, size = [], 0
            if used >= tokens:
                break
    if used < tokens:
        raise ValueError(f"the licence text holds fewer than {tokens} tokens")
    return Dialogue(tuple(messages), ())
