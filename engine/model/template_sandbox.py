"""The sandbox a GGUF's chat template runs in: no code execution, and bounded resources.

jinja2's immutable sandbox stops a template from reaching Python, but not from spending time
and memory: `{% set ns.s = ns.s ~ ns.s %}` in a loop doubles a string to gigabytes, and three
nested loops over `range(100000)` run for days. Every render here gets a budget (render.py's
caller sets it): a deadline and a size cap. The template's syntax tree is rewritten so that
every loop iterates through `guard_iter` and every `~` goes through `guard_concat`; calls,
filters and the `+ * % **` operators are checked too. Whatever would build a string larger
than the cap, or run past the deadline, raises RenderLimitError, and the render is refused.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import re
import time
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

_MAX_POW_BITS = 4096
# A %-format or str.format width or precision of 7 digits or more: a megabyte of padding.
_HUGE_FORMAT = re.compile(r"%[-#0 +]*\d{7,}|%[-#0 +]*\d*\.\d{7,}|\{[^{}]*:[^{}]*\d{7,}")
_CHECK_EVERY = 256  # guarded steps between looks at the clock


class RenderLimitError(SecurityError):
    """A render ran past its deadline or would have built text beyond its size cap."""


@dataclass
class Budget:
    deadline: float  # time.monotonic() value
    seconds: float
    max_chars: int
    steps: int = 0

    def step(self) -> None:
        self.steps += 1
        if self.steps % _CHECK_EVERY == 0 and time.monotonic() > self.deadline:
            raise RenderLimitError(f"rendering took longer than {self.seconds:g} s")

    def check_size(self, size: int, what: str) -> None:
        if size > self.max_chars:
            raise RenderLimitError(f"{what} of {size:,} characters exceeds the limit of "
                                   f"{self.max_chars:,}")


_BUDGET: ContextVar[Budget | None] = ContextVar("chat_template_budget", default=None)


@contextlib.contextmanager
def budget(seconds: float, max_chars: int) -> Iterator[Budget]:
    """Limits for the renders inside the block (per thread and task)."""
    current = Budget(time.monotonic() + seconds, seconds, max_chars)
    token = _BUDGET.set(current)
    try:
        yield current
    finally:
        _BUDGET.reset(token)


def _current() -> Budget:
    current = _BUDGET.get()
    if current is None:  # a render outside `budget()` is a bug: refuse rather than run free
        raise RenderLimitError("render without a budget")
    return current


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, list, tuple)) else 0


def _check_numbers(args: Iterable[Any], limit: Budget) -> None:
    """A number passed to a call, filter or format is a size it may build: bound it."""
    for arg in args:
        if isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) > limit.max_chars:
            raise RenderLimitError(f"number {arg} too large")


def _check_format(fmt: Any) -> None:
    # Only format strings: a message's text passed to a call may say anything.
    if isinstance(fmt, str) and _HUGE_FORMAT.search(fmt):
        raise RenderLimitError("format width or precision too large")


def _estimate(name: str, subject: Any, args: tuple, limit: Budget) -> None:
    """Refuse a replace, join or indent whose result would be too large, before it runs."""
    if name == "replace" and isinstance(subject, str) and len(args) >= 2:
        old, new = str(args[0]), str(args[1])
        hits = subject.count(old) if old else len(subject) + 1
        limit.check_size(len(subject) + hits * max(0, len(new) - len(old)), "replace result")
    elif name == "join" and isinstance(subject, str) and args:
        items = args[0]
        if isinstance(items, (list, tuple, range)):
            limit.check_size(len(subject) * len(items), "join result")
    elif name == "indent" and isinstance(subject, str) and args and isinstance(args[0], str):
        limit.check_size(len(subject) + len(args[0]) * (subject.count("\n") + 1),
                         "indent result")


class _Guards(NodeTransformer):
    """Routes every loop and every `~` of a parsed template through the budget's checks."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        node = self.generic_visit(node)
        node.iter = _env_call("guard_iter", [node.iter], node)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        node = self.generic_visit(node)
        return _env_call("guard_concat", list(node.nodes), node)


def _env_call(name: str, args: list, like: nodes.Node) -> nodes.Call:
    # environment.<name>(...): a template cannot rebind an environment attribute.
    call = nodes.Call(nodes.EnvironmentAttribute(name), args, [], None, None)
    call.set_lineno(like.lineno)
    call.set_environment(like.environment)
    return call


class LimitedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with every render held to the current Budget."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        for name, func in list(self.filters.items()):
            self.filters[name] = _guarded_filter(name, func)

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        return _Guards().visit(super()._parse(source, name, filename))

    def guard_iter(self, iterable: Iterable[Any]) -> Iterator[Any]:
        limit = _current()
        for item in iterable:
            limit.step()
            yield item

    def guard_concat(self, *parts: Any) -> str:
        limit = _current()
        limit.step()
        texts = [str(p) for p in parts]
        limit.check_size(sum(map(len, texts)), "string")
        return "".join(texts)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        limit = _current()
        limit.step()
        _check_numbers([*args, *kwargs.values()], limit)
        method = getattr(__obj, "__wrapped__", __obj)  # the sandbox wraps str.format
        subject = getattr(method, "__self__", None)
        name = getattr(method, "__name__", "")
        if isinstance(subject, str):
            if name in ("format", "format_map"):
                _check_format(subject)
            _estimate(name, subject, args, limit)
        result = super().call(__context, __obj, *args, **kwargs)
        limit.check_size(_size(result), "result")
        return result

    def call_binop(self, context: Any, operator_: str, left: Any, right: Any) -> Any:
        limit = _current()
        limit.step()
        if operator_ == "**":
            if _pow_too_large(left, right):
                raise RenderLimitError("exponent too large")
            return operator.pow(left, right)
        if operator_ == "*":
            seq, count = (right, left) if isinstance(left, int) else (left, right)
            if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
                limit.check_size(len(seq) * count, "repetition")
        elif operator_ == "+":
            limit.check_size(_size(left) + _size(right), "sum")
        elif operator_ == "%" and isinstance(left, str):
            _check_format(left)
            _check_numbers(right if isinstance(right, tuple) else (right,), limit)
        result = self.binop_table[operator_](left, right)
        limit.check_size(_size(result), "result")
        return result


def _guarded_filter(name: str, func: Any) -> Any:
    # A filter marked pass_context / pass_eval_context / pass_environment gets that first.
    skip = 1 if getattr(func, "jinja_pass_arg", None) else 0

    @functools.wraps(func)  # keeps the mark
    def guarded(*args: Any, **kwargs: Any) -> Any:
        limit = _current()
        limit.step()
        values = args[skip:]
        _check_numbers([*values[1:], *kwargs.values()], limit)
        if name == "format" and values:
            _check_format(values[0])
        if values:
            _estimate(name, values[0], tuple(values[1:]), limit)
        result = func(*args, **kwargs)
        limit.check_size(_size(result), f"{name} result")
        return result

    return guarded


def _pow_too_large(base: Any, exponent: Any) -> bool:
    # Float overflow raises by itself; big ints just grow, so bound the result's bit length.
    if not (isinstance(base, int) and isinstance(exponent, int)) or abs(base) <= 1:
        return False
    return exponent * abs(base).bit_length() > _MAX_POW_BITS
