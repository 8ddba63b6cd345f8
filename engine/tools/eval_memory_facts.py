"""Seeded template conversations for the memory evaluation: facts stated early, filler turns
that push the ring past its budget, then one question per fact with its true answer.

Everything is drawn from small fixed pools with a seeded generator, so a seed names one
conversation exactly. Filler never mentions a fact's answer, so an answer can only come from
the turn that stated it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# (statement, question, answers): the answer goes where {} is.
FACT_TEMPLATES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("My cat is called {}.", "What is my cat called?",
     ("Biscuit", "Pepper", "Mochi", "Juniper", "Waffles", "Clementine")),
    ("The locker code is {}.", "What is the locker code?",
     ("4711", "2093", "8516", "3370", "6248", "9105")),
    ("My sister lives in {}.", "Where does my sister live?",
     ("Lisbon", "Oslo", "Nairobi", "Montreal", "Kyoto", "Valencia")),
    ("I parked the car on level {}.", "On which level did I park the car?",
     ("seven", "three", "nine", "five", "two", "eight")),
    ("The team meeting was moved to {}.", "Which day was the team meeting moved to?",
     ("Thursday", "Monday", "Friday", "Wednesday", "Tuesday", "Saturday")),
    ("My favourite colour is {}.", "What is my favourite colour?",
     ("green", "purple", "orange", "blue", "yellow", "red")),
    ("The wifi password is {}.", "What is the wifi password?",
     ("sunflower", "blueberry", "lighthouse", "marmalade", "riverbank", "snowfall")),
    ("My dentist is Dr. {}.", "What is my dentist's name?",
     ("Okafor", "Lindqvist", "Moreau", "Tanaka", "Castillo", "Brennan")),
)

_SUBJECTS = ("The weather", "The garden", "The new cafe", "My commute", "The library",
             "The football match", "The museum", "Our neighbour's dog", "The bakery",
             "The train", "The concert", "The park")
_VERBS = ("was", "seemed", "felt", "looked", "turned out")
_ADJECTIVES = ("quiet", "busy", "pleasant", "strange", "crowded", "lovely", "noisy", "calm",
               "cold", "bright", "slow", "surprising")
_TAILS = ("this morning", "yesterday afternoon", "all week", "last weekend", "today",
          "after lunch", "in the evening", "for a while")
_ASIDES = ("I might write about it later.", "Nothing much else happened.",
           "It reminded me of a film I saw once.", "I took a few photos.",
           "A friend said the same thing.", "I did not expect that at all.")
_REPLIES = ("That sounds {}. Tell me more if you like.", "Interesting, it seems {} indeed.",
            "I see. A {} day, then.", "Thanks for sharing; it sounds {}.")


@dataclass(frozen=True)
class Fact:
    statement: str
    question: str
    answer: str


@dataclass(frozen=True)
class Dialogue:
    """The messages before the questions, and the facts to ask about, in order."""

    messages: tuple[dict, ...]  # {"role", "content"}; the first is the system prompt
    facts: tuple[Fact, ...]


def make_dialogue(seed: int, facts: int, filler_turns: int, filler_sentences: int) -> Dialogue:
    """Conversation number `seed`: `facts` facts (one user turn each, acknowledged), then
    `filler_turns` exchanges of `filler_sentences` sentences of small talk."""
    if not 1 <= facts <= len(FACT_TEMPLATES):
        raise ValueError(f"facts must be between 1 and {len(FACT_TEMPLATES)}, got {facts}")
    rng = random.Random(seed)
    chosen = [Fact(s.format(a), q, a) for s, q, answers in rng.sample(FACT_TEMPLATES, facts)
              for a in [rng.choice(answers)]]
    messages: list[dict] = [{"role": "system", "content": "You are a helpful assistant."}]
    for fact in chosen:
        messages.append({"role": "user", "content": fact.statement})
        messages.append({"role": "assistant", "content": "Noted."})
    for _ in range(filler_turns):
        adjective = rng.choice(_ADJECTIVES)
        said = " ".join(
            f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_ADJECTIVES)} "
            f"{rng.choice(_TAILS)}. {rng.choice(_ASIDES)}" for _ in range(filler_sentences))
        messages.append({"role": "user", "content": said})
        messages.append({"role": "assistant", "content": rng.choice(_REPLIES).format(adjective)})
    return Dialogue(tuple(messages), tuple(chosen))
