"""Rendering a long transcript through a window: linear, and the same text as rendering it in
full (ChatML, the shipped model's template), or in full when a template is not local."""

from __future__ import annotations

from engine.model.chat_template import ChatTemplate
from engine.session.stream import StreamEvent
from engine.session.transcript import WINDOW_CHECKS, Transcript


class CountingTemplate:
    """The real template, counting the messages each render walks over."""

    def __init__(self, template: ChatTemplate) -> None:
        self.template = template
        self.walked = 0

    def render(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        self.walked += len(messages)
        return self.template.render(messages, add_generation_prompt)


def events(n: int) -> list[StreamEvent]:
    roles = ["system"] + ["user", "assistant"] * n
    return [StreamEvent(f"id{i}", role, f"message {i} " * (i % 3 + 1), "ts")
            for i, role in enumerate(roles[: n + 1])]


def feed(transcript: Transcript, stream: list[StreamEvent]) -> str:
    for i, event in enumerate(stream):
        answered = i + 1 < len(stream) and stream[i + 1].role == "assistant"
        transcript.event_tokens(event, generation_prompt=answered and event.role == "user")
    return transcript.rendered


def test_chatml_renders_through_the_window_in_linear_time(real_model) -> None:
    counting = CountingTemplate(real_model.template)
    t = Transcript(counting, real_model.tokenizer, real_model.fingerprint,
                   real_model.config.vocab_size)
    stream = events(400)
    rendered = feed(t, stream)
    assert t.window_ok is True
    messages = [{"role": e.role, "content": e.content} for e in stream]
    assert rendered == real_model.template.render(messages)
    # Full renders would walk n²/2 = 80,000 messages; the window walks a few per message,
    # plus the checks' full renders early on.
    assert counting.walked < 30 * len(stream)


def test_a_template_that_is_not_local_is_rendered_in_full(real_model) -> None:
    """Numbering messages is prefix-stable but not local: the window gives "3:" where the
    full rendering gives "9:", so the check catches it and every render is full after."""
    numbered = ChatTemplate("{% for m in messages %}{{ loop.index }}:{{ m.content }}|"
                            "{% endfor %}", "", "")
    t = Transcript(numbered, real_model.tokenizer, real_model.fingerprint,
                   real_model.config.vocab_size)
    stream = events(20)
    rendered = feed(t, stream)
    assert t.window_ok is False and t._window_checks < WINDOW_CHECKS
    assert rendered == numbered.render([{"role": e.role, "content": e.content}
                                        for e in stream])


def test_bos_starts_the_ring_once(tmp_path) -> None:
    """A model that wants BOS gets it first, as llama.cpp tokenizes a prompt: once when the
    template writes `bos_token` (Mistral, Llama 3, Phi-3), added when it does not."""
    from pathlib import Path

    from engine.model.model import load_model

    model = load_model(Path(__file__).parent / "fixtures" / "arch" / "mistral.gguf", tmp_path)
    bos = model.tokenizer.bos_id
    assert model.tokenizer.add_bos and bos is not None
    no_bos = ChatTemplate("{% for m in messages %}{{ '[INST] ' + m['content'] + ' [/INST]' }}"
                          "{% endfor %}", model.template.bos_token, model.template.eos_token)
    for template in (model.template, no_bos):
        t = Transcript(template, model.tokenizer, model.fingerprint, model.config.vocab_size)
        ids = t.user_turn("Hello there")
        assert ids[0] == bos and ids.count(bos) == 1
        assert bos not in t.user_turn("And again")  # only the ring's first tokens
