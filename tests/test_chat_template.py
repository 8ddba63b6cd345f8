"""engine/model/chat_template.py: HF-compatible rendering, default system prompts, the sandbox."""

from __future__ import annotations

import time
from pathlib import Path

import gguf
import pytest

from engine.model.chat_template import (
    CHATML_TEMPLATE,
    ChatTemplate,
    ChatTemplateError,
    ChatTemplateLimitError,
)

SMOLLM_DEFAULT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
USER_HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="session")
def smollm(real_model_path: Path) -> ChatTemplate:
    return ChatTemplate.from_gguf(gguf.GGUFReader(str(real_model_path)))


def _tiny_gguf(path: Path, template: str | None) -> gguf.GGUFReader:
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_token_list(["<|endoftext|>", "<s>", "</s>"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    if template is not None:
        writer.add_chat_template(template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return gguf.GGUFReader(str(path))


@pytest.mark.real_model
def test_smollm_injects_its_default_system_prompt(smollm: ChatTemplate) -> None:
    assert smollm.render(USER_HI, add_generation_prompt=True) == (
        f"<|im_start|>system\n{SMOLLM_DEFAULT}<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert smollm.default_system_prompt() == SMOLLM_DEFAULT


@pytest.mark.real_model
def test_smollm_keeps_a_given_system_prompt(smollm: ChatTemplate) -> None:
    messages = [{"role": "system", "content": "Be terse."}, *USER_HI]
    assert smollm.render(messages) == (
        "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
    )
    assert (smollm.bos_token, smollm.eos_token) == ("<|im_start|>", "<|im_end|>")


def test_plain_chatml_injects_nothing() -> None:
    assert ChatTemplate(CHATML_TEMPLATE).default_system_prompt() is None


def test_default_prompt_with_other_wrapping() -> None:
    zephyr_like = (
        "{% if messages[0]['role'] != 'system' %}<|system|>\nBe kind.</s>\n{% endif %}"
        "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
    )
    assert ChatTemplate(zephyr_like).default_system_prompt() == "Be kind."


def test_default_prompt_ending_like_the_sentinel() -> None:
    # The shared suffix must not eat into the prompt when its last letters match ours.
    source = CHATML_TEMPLATE.replace(
        "{% for message in messages %}",
        "{% if messages[0]['role'] != 'user' %}{% else %}"
        "{{ '<|im_start|>system\\nAsk QZX<|im_end|>\\n' }}{% endif %}"
        "{% for message in messages %}",
    )
    assert ChatTemplate(source).default_system_prompt() == "Ask QZX"


def test_template_rejecting_system_role_has_no_default() -> None:
    source = (
        "{% for m in messages %}{% if m['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}"
        "{{ m['content'] }}{% endfor %}"
    )
    assert ChatTemplate(source).default_system_prompt() is None


def test_trim_and_lstrip_blocks_as_in_hf() -> None:
    source = "{% for m in messages %}\n    {% if m['role'] == 'user' %}\n[{{ m['content'] }}]\n"
    source += "    {% endif %}\n{% endfor %}"
    assert ChatTemplate(source).render(USER_HI * 2) == "[hi]\n[hi]\n"


def test_special_token_strings_and_loop_controls() -> None:
    source = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% break %}{% endfor %}"
    source += "{{ eos_token }}{% if add_generation_prompt %}>{% endif %}"
    template = ChatTemplate(source, bos_token="<s>", eos_token="</s>")
    assert template.render(USER_HI * 3, add_generation_prompt=True) == "<s>hi</s>>"


def test_tojson_does_not_html_escape() -> None:
    template = ChatTemplate("{{ messages[0]['content'] | tojson }}")
    assert template.render([{"role": "user", "content": "<b>é</b>"}]) == '"<b>é</b>"'


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("{{ raise_exception('roles must alternate') }}", "roles must alternate"),
        ("{{ ''.__class__.__mro__ }}", "unsafe"),
        ("{{ messages.append(1) }}", "unsafe"),
        ("{{ cycler.__init__.__globals__ }}", "unsafe"),
        ("{{ 'x' * 1000000000 }}", "repetition of 1,000,000,000 characters exceeds"),
        ("{{ 10 ** 100000 }}", "exponent too large"),
        ("{{ messages[0]['content'] + 1 }}", "failed"),
    ],
)
def test_render_failures_are_chat_template_errors(source: str, match: str) -> None:
    with pytest.raises(ChatTemplateError, match=match) as info:
        ChatTemplate(source).render(USER_HI)
    assert "\n" not in str(info.value)


def test_syntax_error_is_reported_with_its_line() -> None:
    with pytest.raises(ChatTemplateError, match="line 2") as info:
        ChatTemplate("ok\n{% for m in %}\n{% endfor %}")
    assert issubclass(ChatTemplateError, ValueError)
    assert "\n" not in str(info.value)


def test_gguf_without_template_falls_back_to_chatml(tmp_path: Path) -> None:
    template = ChatTemplate.from_gguf(_tiny_gguf(tmp_path / "t.gguf", None))
    assert template.source == CHATML_TEMPLATE
    assert (template.bos_token, template.eos_token) == ("<s>", "</s>")
    assert template.render(USER_HI, add_generation_prompt=True) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_gguf_template_is_used(tmp_path: Path) -> None:
    reader = _tiny_gguf(tmp_path / "t.gguf", "{{ bos_token }}{{ messages[0]['content'] }}")
    assert ChatTemplate.from_gguf(reader).render(USER_HI) == "<s>hi"


# Templates that burn memory or time without limit under jinja2's stock sandbox.
HOSTILE_TEMPLATES = {
    "doubling": "{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
    "macro doubling": "{% macro d(s, n) %}{% if n %}{{ d(s ~ s, n - 1) }}{% else %}{{ s }}"
                      "{% endif %}{% endmacro %}{{ d('x', 60) }}",
    "plus doubling": "{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                     "{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "nested loops": "{% set r = range(100000) %}{% for a in r %}{% for b in r %}"
                    "{% for c in r %}{% endfor %}{% endfor %}{% endfor %}",
    "padding": "{{ 'x'|center(1000000000) }}",
    "method padding": "{{ 'x'.ljust(1000000000) }}",
    "percent width": "{{ '%01000000000d' % 1 }}",
    "format width": "{{ '{:>999999999}'.format(1) }}",
    "replace": "{% set s = 'x' * 100000 %}{{ s|replace('', s) }}",
    "output": "{% for i in range(100000) %}{% for j in range(100) %}xxxxxxxxxxxxxxxxxxxx"
              "{% endfor %}{% endfor %}",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_TEMPLATES))
def test_a_template_past_its_limits_is_refused_at_load(name: str) -> None:
    t0 = time.monotonic()
    with pytest.raises(ChatTemplateLimitError, match="exceeds its limits") as info:
        ChatTemplate(HOSTILE_TEMPLATES[name])
    assert time.monotonic() - t0 < 10 and "\n" not in str(info.value)


def test_render_limits_scale_with_the_conversation() -> None:
    template = ChatTemplate(CHATML_TEMPLATE)
    long = [{"role": "user", "content": "word " * 100_000}] * 8  # 4 MB of text
    assert len(template.render(long)) > 4_000_000
    doubling_content = ChatTemplate(
        "{% for m in messages %}{{ m['content'] ~ m['content'] ~ m['content'] ~ m['content'] ~"
        " m['content'] }}{% endfor %}")
    with pytest.raises(ChatTemplateLimitError, match="exceeds the limit"):
        doubling_content.render(long)
