"""Thinking templates (Qwen3, Qwen3.5): the reply opens inside `<think>` (the generation
prompt's), and the template renders a past reply its own way: the reasoning reformatted while
it is the newest reply, dropped once a later question follows. The ring keeps every reply as
generated; the transcript feeds each later message as what the template writes after the
reply's closing (engine/session/transcript.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.model.chat_template import ChatTemplate
from engine.model.model import load_model
from engine.session.transcript import Transcript

FIXTURE = Path(__file__).parent / "fixtures" / "arch" / "qwen35.gguf"

# Qwen3's official template, its plain-conversation part: replies after the last question keep
# their reasoning in a <think> block (an empty one for the newest), earlier ones lose it.
QWEN3_STYLE = (
    "{%- set ns = namespace(last_query_index=0) -%}"
    "{%- for m in messages -%}{%- if m['role'] == 'user' -%}"
    "{%- set ns.last_query_index = loop.index0 -%}{%- endif -%}{%- endfor -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] != 'assistant' -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{%- set content = message['content'] -%}{%- set reasoning = '' -%}"
    "{%- if '</think>' in content -%}"
    "{%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\\n') -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}"
    "{%- endif -%}"
    "{%- if loop.index0 > ns.last_query_index -%}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning + '\\n</think>\\n\\n' + content"
    " + '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' -}}"
    "{%- endif -%}{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n<think>\\n' -}}{%- endif -%}"
)


@pytest.fixture(scope="module")
def qwen35(tmp_path_factory):
    return load_model(FIXTURE, tmp_path_factory.mktemp("thinking-cache"))


@pytest.mark.parametrize("template", ["fixture", "qwen3-style"])
def test_turns_after_reasoned_replies_feed_only_the_new_message(qwen35, template) -> None:
    chat = qwen35.template if template == "fixture" else ChatTemplate(QWEN3_STYLE)
    tok = qwen35.tokenizer
    transcript = Transcript(chat, tok, qwen35.fingerprint, qwen35.config.vocab_size)
    opening = "<|im_start|>assistant\n<think>\n"
    assert tok.decode(transcript.user_turn("Hi")) == f"<|im_start|>user\nHi<|im_end|>\n{opening}"
    assert tok.decode(transcript.close_assistant("let me see</think>\n\nHello")) == (
        "<|im_end|>\n")
    for question, reply in (("Again", "hmm\n</think>\n\nYes"), ("Once more", "</think>No")):
        fed = tok.decode(transcript.user_turn(question))
        assert fed == f"<|im_start|>user\n{question}<|im_end|>\n{opening}"
        assert tok.decode(transcript.close_assistant(reply)) == "<|im_end|>\n"
    # The transcript follows the template's own rendering of the whole history.
    assert transcript.rendered == chat.render(transcript.messages, add_generation_prompt=False)


def test_a_template_that_rewrites_replies_without_a_reasoning_prompt_is_refused(qwen35) -> None:
    """Only a reply opened by the generation prompt may close on the template's rendering;
    a template that rewrites a reply it did not open is refused, as before."""
    upper = ChatTemplate(
        "{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] | upper"
        " + '<|im_end|>\\n' -}}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")
    transcript = Transcript(upper, qwen35.tokenizer, qwen35.fingerprint,
                            qwen35.config.vocab_size)
    transcript.user_turn("hi")
    with pytest.raises(ValueError, match="rewrites assistant replies"):
        transcript.close_assistant("hello")
