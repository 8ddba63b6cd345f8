"""`channel eval memory`: what each eviction policy keeps, measured (docs/memory.md).

Two kinds of conversation are each read through a ring of 12.5%, 25% and 50% of their length
under each policy, and through a ring that holds them whole (the ceiling):

- perplexity (`ppl`) of a long natural text read as a conversation (eval_memory_text.py),
  every token predicted from what the ring kept;
- fact recall on seeded template conversations (eval_memory_facts.py): at each question the
  true answer is teacher-forced, which gives the mean log-probability of its tokens, and exact
  match, which is greedy decoding's answer: greedy decoding starts with the true answer
  exactly when every answer token is the argmax of the logits before it (so no generated text
  has to be rolled back out of the ring). Their perplexity is reported too (`dialogue_ppl`),
  but it mostly measures how much of the filler's small vocabulary pools the ring still
  shows, which is why `ppl` is taken on the natural text.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..backends.base import Backend
from ..conversation import Conversation
from ..model.model import Model
from ..state.ring_policy import DEFAULT_EVICT, EVICT_POLICIES, RingPolicy
from .eval_memory_facts import Dialogue, make_dialogue
from .eval_memory_text import licence_dialogue

BUDGETS = (0.125, 0.25, 0.5)

Progress = Callable[[int, int, str], None]  # done, total, what runs next


@dataclass(frozen=True)
class EvalParams:
    conversations: int = 3
    facts: int = 8
    filler_turns: int = 20
    filler_sentences: int = 3
    seed: int = 0
    text_tokens: int = 3000  # of the natural text read for `ppl`
    policies: tuple[str, ...] = EVICT_POLICIES
    budgets: tuple[float, ...] = BUDGETS


QUICK = EvalParams(conversations=1, facts=2, filler_turns=3, filler_sentences=1,
                   text_tokens=300)


@dataclass(frozen=True)
class Segment:
    tokens: list[int]
    anchors: bool = False  # the system prompt: pinned in the ring, like a session's
    answer: bool = False  # a true answer: teacher-forced token by token and scored
    turn_start: bool = False  # a user message: a turn starts here, as in a session


@dataclass
class Tally:
    """Sums over conversations; `scores()` gives the reported means."""

    nll: float = 0.0
    predicted: int = 0
    hits: int = 0
    questions: int = 0
    answer_logprob: float = 0.0
    answer_tokens: int = 0

    @property
    def ppl(self) -> float:
        return math.exp(self.nll / self.predicted)

    def scores(self, text: Tally) -> dict:
        """The reported figures: `text` holds the natural text's perplexity, this tally the
        fact conversations'."""
        return {"ppl": text.ppl,
                "recall_exact": self.hits / self.questions,
                "answer_logprob": self.answer_logprob / self.answer_tokens,
                "dialogue_ppl": self.ppl}


def segments_of(model: Model, dialogue: Dialogue) -> list[Segment]:
    """The conversation as the chat template renders it, cut where each message starts;
    each question is followed by its true answer, as the assistant's reply."""
    render, encode = model.template.render, model.tokenizer.encode
    messages = list(dialogue.messages)

    def after(shorter: str, longer: str) -> str:
        if not longer.startswith(shorter):
            raise ValueError("the chat template does not render a conversation turn by turn")
        return longer[len(shorter):]

    segments = [Segment(encode(render(messages[:1])), anchors=True)]
    for i in range(2, len(messages) + 1):
        segments.append(Segment(encode(after(render(messages[: i - 1]), render(messages[:i]))),
                                turn_start=messages[i - 1]["role"] == "user"))
    for fact in dialogue.facts:
        before = render(messages)
        messages.append({"role": "user", "content": fact.question})
        asked = render(messages, add_generation_prompt=True)
        segments.append(Segment(encode(after(before, asked)), turn_start=True))
        messages.append({"role": "assistant", "content": fact.answer})
        reply = after(asked, render(messages))
        if not reply.startswith(fact.answer):
            raise ValueError("the chat template changes the assistant's reply")
        segments.append(Segment(encode(fact.answer), answer=True))
        segments.append(Segment(encode(reply[len(fact.answer):])))
    return [s for s in segments if s.tokens]


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits.astype(np.float64) - float(logits.max())
    return shifted - math.log(float(np.exp(shifted).sum()))


def score_conversation(conv: Conversation, segments: list[Segment], tally: Tally) -> None:
    """Read `segments` through `conv`, adding every next-token NLL and each answer's
    recall to `tally`."""
    project = conv.forward.project_logits
    if not conv.forward.projects_hidden:
        raise ValueError(f"eval memory is not available on the {conv.backend.name} backend")
    seq = np.asarray([t for s in segments for t in s.tokens], np.int64)
    vocab = conv.model.config.vocab_size
    rows_out = np.empty((conv.policy.prefill_chunk, vocab), np.float32)
    state = {"pos": 0}

    def on_hidden(hidden: np.ndarray) -> None:  # rows at pos.. predict seq[pos + 1..]
        rows, start = hidden.shape[0], state["pos"]
        out = rows_out[:rows]
        project(hidden, out)
        peak = out.max(axis=1, keepdims=True)
        log_z = np.log(np.exp(out - peak).sum(axis=1)) + peak[:, 0]
        counted = min(rows, len(seq) - 1 - start)
        picked = out[np.arange(counted), seq[start + 1 : start + 1 + counted]]
        tally.nll += float((log_z[:counted] - picked).sum(dtype=np.float64))
        tally.predicted += counted
        state["pos"] = start + rows

    last: np.ndarray | None = None
    for segment in segments:
        if segment.turn_start:
            conv.ring.mark_turn_start()
        if not segment.answer:
            last = conv.ingest(segment.tokens, anchors=segment.anchors, on_hidden=on_hidden)
            continue
        hit = True
        for token in segment.tokens:
            assert last is not None  # an answer always follows its question
            lp = _log_softmax(last)
            tally.answer_logprob += float(lp[token])
            tally.answer_tokens += 1
            hit = hit and int(np.argmax(last)) == token
            last = conv.forward.decode_one_token(token)
            state["pos"] += 1  # tokens read so far, so the new logits predict seq[pos]
            if state["pos"] < len(seq):
                tally.nll -= float(_log_softmax(last)[seq[state["pos"]]])
                tally.predicted += 1
        tally.hits += hit
        tally.questions += 1


def ring_of(slots: int, evict: str) -> RingPolicy:
    base = RingPolicy(evict=evict)
    return RingPolicy(max_slots=slots, evict=evict) if slots >= base.max_slots \
        else base.scaled_to(slots)


def _read_through_ring(model: Model, backend: Backend | None, segments: list[Segment],
                       name: str, budget: float | None, tally: Tally) -> None:
    """Score `segments` through a ring of `budget` of their length forgetting by `name`
    (`budget` None: a ring that holds them whole)."""
    length = sum(len(s.tokens) for s in segments)
    slots = length + 1 if budget is None else max(2, round(budget * length))
    policy = ring_of(slots, DEFAULT_EVICT if budget is None else name)
    if policy.max_slots - len(segments[0].tokens) - policy.recent_window < 1:
        raise ValueError(f"a ring of {slots} slots ({budget:g} of {length} tokens) "
                         f"has no room beside the system prompt; use longer turns")
    score_conversation(Conversation(model, policy, backend=backend), segments, tally)


def evaluate_memory(model: Model, backend: Backend | None = None,
                    params: EvalParams = EvalParams(),
                    progress: Progress | None = None) -> dict:
    """`{"default", "full", "policies": {NAME: {BUDGET: scores}}}`, scores being
    `{"ppl", "recall_exact", "answer_logprob", "dialogue_ppl"}` over all conversations."""
    for name in params.policies:
        RingPolicy(evict=name)  # an unknown name is refused before any work
    encode = model.tokenizer.encode
    text = segments_of(model, licence_dialogue(lambda s: len(encode(s)), params.text_tokens))
    dialogues = [segments_of(model, make_dialogue(params.seed + i, params.facts,
                                                  params.filler_turns, params.filler_sentences))
                 for i in range(params.conversations)]
    context = model.config.context_length
    for segments in [text, *dialogues]:
        length = sum(len(s.tokens) for s in segments)
        if length >= context:
            raise ValueError(f"an evaluation conversation of {length} tokens does not fit the "
                             f"model's context ({context}); ask for fewer turns")
    runs = [("full", None)] + [(p, b) for p in params.policies for b in params.budgets]
    facts = {run: Tally() for run in runs}
    texts = {run: Tally() for run in runs}
    total, done = len(runs) * (1 + len(dialogues)), 0
    for name, budget in runs:
        for segments, tally in [(text, texts), *((d, facts) for d in dialogues)]:
            if progress:
                progress(done, total, name if budget is None else f"{name} {budget:g}")
            _read_through_ring(model, backend, segments, name, budget, tally[(name, budget)])
            done += 1
    if progress:
        progress(done, total, "")
    full = ("full", None)
    return {
        "default": DEFAULT_EVICT,
        "full": facts[full].scores(texts[full]),
        "policies": {p: {str(b): facts[(p, b)].scores(texts[(p, b)]) for b in params.budgets}
                     for p in params.policies},
    }
