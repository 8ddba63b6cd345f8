"""Thinking templates (Qwen3, Qwen3.5): the reply opens inside `<think>` (the generation
prompt's), and the template renders a past reply its own way: the reasoning reformatted while
it is the newest reply, dropped once a later question follows. The ring keeps every reply as
generated; the transcript feeds each later message as what the template writes after the
reply's closing (engine/session/transcript.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from ulid import ULID

from engine.model.chat_template import ChatTemplate
from engine.model.model import load_model
from engine.session.fork import fork_session
from engine.session.session import Session
from engine.session.stream import StreamEvent
from engine.session.transcript import Transcript
from engine.state.ring_policy import RingPolicy
from engine.state.sampler import SamplingSettings

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


def chatml(content: str = "m['content']") -> ChatTemplate:
    """A ChatML template without reasoning; `content`: what each message's content renders
    as (a Jinja expression over `m`)."""
    return ChatTemplate(
        "{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + '\\n' + " + content
        + " + '<|im_end|>\\n' -}}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")


def thinking_template(model, name: str) -> ChatTemplate:
    """The fixture's own (Qwen3.5's) template, or Qwen3's plain-conversation part."""
    return model.template if name == "fixture" else ChatTemplate(QWEN3_STYLE)


def transcript_of(model, chat: ChatTemplate) -> Transcript:
    return Transcript(chat, model.tokenizer, model.fingerprint, model.config.vocab_size)


@pytest.mark.parametrize("template", ["fixture", "qwen3-style"])
def test_turns_after_reasoned_replies_feed_only_the_new_message(qwen35, template) -> None:
    chat = thinking_template(qwen35, template)
    tok = qwen35.tokenizer
    transcript = transcript_of(qwen35, chat)
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
    transcript = transcript_of(qwen35, chatml("m['content'] | upper"))
    transcript.user_turn("hi")
    with pytest.raises(ValueError, match="rewrites assistant replies"):
        transcript.close_assistant("hello")


@pytest.mark.parametrize("template", ["fixture", "qwen3-style"])
def test_a_long_reasoning_chat_through_the_window_feeds_what_full_renders_feed(
        qwen35, template) -> None:
    """Past the first few turns a thinking template's turns are rendered through the window
    (the first message and the last few), as other templates' are; every token fed must be
    what rendering the whole history each time feeds."""
    chat = thinking_template(qwen35, template)
    windowed, full = transcript_of(qwen35, chat), transcript_of(qwen35, chat)
    full.window_ok = False  # never trusts a window: the whole history every time
    replies = ("let me see</think>\n\nHello", "hmm\n</think>\n\nYes", "</think>No",
               "a long think\nover lines\n</think>\n\nThe answer, at length.")
    for turn in range(14):
        question = f"question {turn}" + " and more" * (turn % 3)
        assert windowed.user_turn(question) == full.user_turn(question), turn
        reply = replies[turn % len(replies)]
        assert windowed.close_assistant(reply) == full.close_assistant(reply), turn
    assert windowed.window_ok is True and full.window_ok is False
    assert windowed.messages == full.messages


@pytest.mark.parametrize("template", ["fixture", "qwen3-style"])
def test_a_transcript_restored_after_a_reasoned_reply_takes_the_next_question(
        qwen35, template) -> None:
    """A warm boot adopts the stream's messages (reset_to) without closing their replies
    itself; the next question re-renders the last reply without its reasoning, and must be
    fed as the live transcript feeds it, not refused as a template that is not
    prefix-stable."""
    chat = thinking_template(qwen35, template)
    live, restored = transcript_of(qwen35, chat), transcript_of(qwen35, chat)
    for question, reply in (("Hi", "let me see</think>\n\nHello"), ("Again", "hmm</think>Yes")):
        live.user_turn(question)
        live.close_assistant(reply)
    events = [StreamEvent(str(ULID()), m["role"], m["content"], "2026-12-07T00:00:00Z")
              for m in live.messages]
    restored.reset_to(events, awaiting_reply=False)
    assert restored.user_turn("And now?") == live.user_turn("And now?")
    assert restored.close_assistant("so</think>\n\nDone") == live.close_assistant(
        "so</think>\n\nDone")


def test_a_plain_template_has_no_reply_closing_to_restore(qwen35) -> None:
    transcript = transcript_of(qwen35, chatml())
    transcript.reset_to([StreamEvent(str(ULID()), role, text, "2026-12-07T00:00:00Z")
                         for role, text in (("user", "hi"), ("assistant", "hello"))], False)
    assert transcript._reply_closing is None
    assert qwen35.tokenizer.decode(transcript.user_turn("bye")) == (
        "<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n")


def test_a_qwen3_template_session_boots_warm_and_answers_as_the_live_one(
        qwen35, tmp_path) -> None:
    """End to end through a snapshot: with Qwen3's template, a session that boots warm
    behind a reply (reset_to) answers the next question as the saving process does."""
    model = dataclasses.replace(qwen35, template=ChatTemplate(
        QWEN3_STYLE, qwen35.template.bos_token, qwen35.template.eos_token))
    policy = RingPolicy(max_slots=96, recent_window=8, evict_batch=8, prefill_chunk=16)
    live = Session(model, tmp_path, "live", policy)
    live.boot()
    live.turn("Tell me about the sea.", SamplingSettings(), max_tokens=8)
    assert live.save().status.name == "SAVED"
    fork_session(tmp_path, "live", "warm")
    warm = Session(model, tmp_path, "warm", policy)
    assert warm.boot().kind == "warm"
    want = live.turn("And the mountains?", SamplingSettings(), max_tokens=8)
    got = warm.turn("And the mountains?", SamplingSettings(), max_tokens=8)
    assert got.reply_ids == want.reply_ids and len(want.reply_ids) > 0
