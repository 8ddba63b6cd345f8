"""Renders a GGUF's Jinja chat template the way HF `apply_chat_template` does, sandboxed.

A GGUF is untrusted input, so its template runs in jinja2's immutable sandbox, with the string
and number blow-ups the stock sandbox allows (`'x' * 10**10`) refused as well.
"""

from __future__ import annotations

import json
import operator
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

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

# Caps on what one `*` or `**` may build; real chat templates stay far below these.
_MAX_REPEAT_LEN = 1 << 20
_MAX_POW_BITS = 4096


class ChatTemplateError(ValueError):
    """The chat template does not compile, breaks the sandbox, or fails to render."""


class _Sandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox plus limits on `*` and `**`, which jinja2 leaves unchecked."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, operator_: str, left: Any, right: Any) -> Any:
        if operator_ == "**":
            if _pow_too_large(left, right):
                raise SecurityError("exponent too large")
            return operator.pow(left, right)
        seq, count = (right, left) if isinstance(left, int) else (left, right)
        repeats = isinstance(seq, (str, list, tuple)) and isinstance(count, int)
        if repeats and len(seq) * count > _MAX_REPEAT_LEN:
            raise SecurityError("sequence repetition too large")
        return operator.mul(left, right)


def _pow_too_large(base: Any, exponent: Any) -> bool:
    # Float overflow raises by itself; big ints just grow, so bound the result's bit length.
    if not (isinstance(base, int) and isinstance(exponent, int)) or abs(base) <= 1:
        return False
    return exponent * abs(base).bit_length() > _MAX_POW_BITS


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
        env = _Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
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
        """The prompt text for `messages` ({"role", "content"} dicts)."""
        try:
            return self._template.render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except Exception as exc:  # SecurityError, TemplateError, or the template's own bug
            raise ChatTemplateError(f"chat template failed: {_one_line(exc)}") from exc

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
        if not injected:
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
