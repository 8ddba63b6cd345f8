"""Renders a GGUF's Jinja chat template the way HF `apply_chat_template` does, sandboxed.

A GGUF is untrusted input, so its template runs in jinja2's immutable sandbox, and every
render is held to a deadline and a size cap (template_sandbox.py): the blow-ups the stock
sandbox allows (`'x' * 10**10`, `~` doubling, nested loops) are refused with their reason. A
template that exceeds the limits on a small sample conversation is refused when the model
loads.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext

from .template_sandbox import LimitedSandbox, RenderLimitError, budget

# Used when a GGUF carries no template: SmolLM2's format without its default system prompt.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Upper-case letters only, so templates that trim or quote content leave them findable.
_SENTINEL_SYSTEM = "QZXSYSTEMSENTINELQZX"
_SENTINEL_USER = "QZXUSERSENTINELQZX"

# Render limits. Real templates render a long conversation in milliseconds, and their output
# is the messages plus a little markup per message.
RENDER_SECONDS = 2.0
MIN_OUTPUT_CHARS = 1 << 20
OUTPUT_PER_INPUT_CHAR = 4
# Stands for a conversation when a template is checked at load: every role, some text.
_PROBE = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello?"},
          {"role": "assistant", "content": "Hi."}, {"role": "user", "content": "Bye."}]


class ChatTemplateError(ValueError):
    """The chat template does not compile, breaks the sandbox, or fails to render."""


class ChatTemplateLimitError(ChatTemplateError):
    """The chat template ran past its render deadline or size cap."""


def _raise_exception(message: str) -> None:
    # HF templates call this to reject a conversation (e.g. roles out of order).
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: int | None = None, sort_keys: bool = False
) -> str:
    # HF replaces jinja's tojson, which HTML-escapes '<' and '>' and would mangle prompts.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, jinja2.TemplateSyntaxError) and exc.lineno:
        text = f"line {exc.lineno}: {text}"
    return text if len(text) <= 200 else text[:197] + "..."


class ChatTemplate:
    """A compiled chat template plus the special-token strings it may reference."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "") -> None:
        # trim_blocks/lstrip_blocks and loopcontrols are what HF uses, and templates are
        # written against exactly that environment.
        env = LimitedSandbox(trim_blocks=True, lstrip_blocks=True,
                             extensions=[jinja2.ext.loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        try:
            self._template = env.from_string(source)
        except Exception as exc:  # TemplateSyntaxError mostly, but a GGUF can hold anything
            raise ChatTemplateError(f"chat template does not compile: {_one_line(exc)}") from exc
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        try:
            self.render(_PROBE, add_generation_prompt=True)
        except ChatTemplateLimitError as exc:
            raise ChatTemplateLimitError(f"{exc} (on a four-message sample)") from None
        except ChatTemplateError:
            pass  # e.g. a template that takes no system message: judged when it is used

    @classmethod
    def from_gguf(cls, reader: Any) -> ChatTemplate:
        """The GGUF's `tokenizer.chat_template`, or plain ChatML when it has none."""
        field = reader.fields.get("tokenizer.chat_template")
        source = field.contents() if field is not None else CHATML_TEMPLATE
        return cls(
            source,
            bos_token=_token_text(reader, "tokenizer.ggml.bos_token_id"),
            eos_token=_token_text(reader, "tokenizer.ggml.eos_token_id"),
        )

    def render(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        """The prompt text for `messages` ({"role", "content"} dicts), within the limits."""
        given = sum(len(str(m.get("content", ""))) for m in messages)
        cap = max(MIN_OUTPUT_CHARS, OUTPUT_PER_INPUT_CHAR * given)
        try:
            with budget(RENDER_SECONDS, cap) as limit:
                chunks, size = [], 0
                for chunk in self._template.generate(
                    messages=messages, add_generation_prompt=add_generation_prompt,
                    bos_token=self.bos_token, eos_token=self.eos_token,
                ):
                    size += len(chunk)
                    limit.check_size(size, "output")
                    limit.step()
                    chunks.append(chunk)
                return "".join(chunks)
        except RenderLimitError as exc:
            raise ChatTemplateLimitError(f"chat template exceeds its limits: "
                                         f"{_one_line(exc)}") from None
        except MemoryError:
            raise ChatTemplateLimitError("chat template exceeds its limits: out of "
                                         "memory") from None
        except Exception as exc:  # SecurityError, TemplateError, or the template's own bug
            raise ChatTemplateError(f"chat template failed: {_one_line(exc)}") from exc

    def check_system_prompt(self, text: str) -> None:
        """Raise ChatTemplateError, in words, if the template cannot take `text` as the
        system prompt (some refuse the role, some drop it)."""
        try:
            rendered = self.render([{"role": "system", "content": text},
                                    {"role": "user", "content": _SENTINEL_USER}], True)
        except ChatTemplateLimitError:
            raise
        except ChatTemplateError as exc:
            raise ChatTemplateError(f"this model's chat template takes no system prompt "
                                    f"({exc})") from None
        if text.strip() not in rendered:
            raise ChatTemplateError("this model's chat template leaves the system prompt out")

    def default_system_prompt(self) -> str | None:
        """The system prompt the template adds when the conversation has none, else None."""
        try:
            with_system = self.render(
                [
                    {"role": "system", "content": _SENTINEL_SYSTEM},
                    {"role": "user", "content": _SENTINEL_USER},
                ]
            )
        except ChatTemplateError:
            return None  # a template that rejects system messages has none to inject
        without = self.render([{"role": "user", "content": _SENTINEL_USER}])
        start = with_system.find(_SENTINEL_SYSTEM)
        if start < 0:
            return None
        prefix = with_system[:start]  # system block opening, plus any BOS
        tail = with_system[start + len(_SENTINEL_SYSTEM) :]  # system block closing + user block
        # The shared suffix is the user block (and usually the system block's closing). It may
        # not reach into the sentinel, or a default prompt ending like it would be cut short.
        shared = min(_common_suffix_len(with_system, without), len(tail))
        injected = without[: len(without) - shared]
        # Nothing beyond the opening the system message was written into: a template that
        # folds the system message into the first user turn (Gemma's) adds none of its own.
        if not injected or prefix.startswith(injected):
            return None
        unshared_close = tail[: len(tail) - shared]
        if injected.startswith(prefix):
            injected = injected[len(prefix) :]
        if unshared_close and injected.endswith(unshared_close):
            injected = injected[: -len(unshared_close)]
        return injected


def _common_suffix_len(a: str, b: str) -> int:
    n = 0
    limit = min(len(a), len(b))
    while n < limit and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def _token_text(reader: Any, id_field: str) -> str:
    # One string of the 49k-entry token array, without decoding the whole array.
    field = reader.fields.get(id_field)
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if field is None or tokens is None:
        return ""
    tid = int(field.contents())
    return tokens.contents(tid) if 0 <= tid < len(tokens.data) else ""
