"""The engine's line-delimited JSON protocol (docs/protocol.md): the one validation layer.

A request line is checked in full here, before the engine acts on it in any way: its size in
bytes, UTF-8, JSON (nesting included), the schema, every field's type, range and size, valid
Unicode in every string, and the sampling settings as a whole. A line that fails raises
ProtocolError with a one-line reason, so nothing is logged, ingested or opened for it. This
module imports nothing heavy, so clients may use it too: it is the one source of truth for
both sides (the TUI imports PROTOCOL_VERSION, the session-name rule and the data-directory
defaults from here; the event shapes are in events.py).

Adding a request is one entry in REQUESTS here and one in the server's handler table.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import (  # noqa: F401 (SESSION_NAME, default_data_dir: shared with clients)
    SESSION_NAME,
    default_data_dir,
    ensure_private_dir,
    session_name_problem,
)
from ..state.sampling import MAX_REPLY_TOKENS, REQUEST_FIELDS, checked_overrides
from ..text import decode_utf8, parse_json, utf8_size

PROTOCOL_VERSION = 1
MAX_LINE_BYTES = 1 << 20  # a request larger than this is refused, not parsed
# A message larger than this is refused (--max-message-bytes). The ring holds a few thousand
# tokens, a few pages of text: a bigger message mostly costs prefill time it then evicts.
DEFAULT_MAX_MESSAGE_BYTES = 64 << 10
MAX_NAME_BYTES = 256  # a string id or a client name
MAX_PATH_BYTES = 4096  # an `open` request's model path (PATH_MAX)
MAX_INT_ID = (1 << 63) - 1
# The `error` code of an `open` refused while another Channel has the session open: a front
# end offers a fork or another session instead (docs/protocol.md, "One writer per session").
SESSION_BUSY = "session_busy"


@dataclass(frozen=True)
class Limits:
    """The size limits of one engine process."""

    max_line_bytes: int = MAX_LINE_BYTES
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES

    def __post_init__(self) -> None:
        if not 1 <= self.max_message_bytes <= self.max_line_bytes:
            raise ValueError(f"--max-message-bytes must be from 1 to {self.max_line_bytes}, "
                             f"got {self.max_message_bytes}")


# A field check returns what is wrong with a value (its type already checked), or None.
Check = Callable[[object, Limits], "str | None"]


def text_problem(text: str, max_bytes: int, limit_name: str = "") -> str | None:
    size = utf8_size(text)
    if size is None:
        return "holds a lone surrogate (not valid Unicode)"
    if size > max_bytes:
        return f"is {size} bytes; the limit is {max_bytes}{limit_name}"
    return None


def message_problem(text: str, limits: Limits) -> str | None:
    """What is wrong with a user message (`turn`'s text, `channel send`'s), or None."""
    problem = text_problem(text, limits.max_message_bytes, " (--max-message-bytes)")
    return problem or (None if text.strip() else "is empty")


def _system_prompt(value: str, limits: Limits) -> str | None:
    """A system prompt (`open`'s for a new session, `fork`'s): a message's limits; blank
    is the template's own."""
    return text_problem(value, limits.max_message_bytes, " (--max-message-bytes)")


def _event_id(value: str, limits: Limits) -> str | None:
    """A stream event's id (a ULID: 26 characters)."""
    return None if len(value) == 26 and value.isalnum() else f"is not an event id: {value[:40]!r}"


def _name(value, limits: Limits) -> str | None:
    return text_problem(value, MAX_NAME_BYTES)


def _session(value, limits: Limits) -> str | None:
    return text_problem(value, 64) or session_name_problem(value)


def _model_path(value, limits: Limits) -> str | None:
    """An `open` request's model: an absolute path to a GGUF (the `models` event's `path`)."""
    problem = text_problem(value, MAX_PATH_BYTES)
    if problem:
        return problem
    return None if os.path.isabs(value) and "\0" not in value else (
        f"must be an absolute path, got {value!r}")


def _between(low: int, high: int) -> Check:
    def check(value, limits: Limits) -> str | None:
        return None if low <= value <= high else f"must be from {low} to {high}, got {value}"
    return check


@dataclass(frozen=True)
class Field:
    type: type
    check: Check | None = None


SESSION = Field(str, _session)
# A reply's settings: `turn` and `regenerate` take them. Ranges are SamplingSettings'; a
# setting left out is the model's default (state/sampling_defaults.py).
REPLY_OPTIONS = {"max_tokens": Field(int, _between(0, MAX_REPLY_TOKENS)),
                 **{name: Field(kind) for name, kind in REQUEST_FIELDS.items()}}
# Request type -> (required fields, optional fields), one line each.
REQUESTS: dict[str, tuple[dict[str, Field], dict[str, Field]]] = {
    "hello": ({}, {"client": Field(str, _name),
                   "protocol": Field(int, _between(0, 1 << 31))}),
    "open": ({"session": SESSION}, {"cold": Field(bool), "model": Field(str, _model_path),
                                    "system": Field(str, _system_prompt)}),
    "models": ({}, {}),
    "turn": ({"session": SESSION, "text": Field(str, message_problem)}, REPLY_OPTIONS),
    "regenerate": ({"session": SESSION}, {**REPLY_OPTIONS, "reply": Field(str, _event_id)}),
    "undo": ({"session": SESSION}, {}),
    "fork": ({"session": SESSION, "new": SESSION}, {"system": Field(str, _system_prompt),
                                                    "turn": Field(int, _between(0, 1 << 31))}),
    "rewind": ({"session": SESSION, "turn": Field(int, _between(0, 1 << 31))},
               {"dry_run": Field(bool)}),
    "cancel": ({"session": SESSION}, {}),
    "save": ({"session": SESSION}, {}),
    "restore": ({"session": SESSION}, {}),
    "stats": ({}, {"session": SESSION}),
    "boot_compare": ({"session": SESSION}, {}),
    "close": ({"session": SESSION}, {}),
    "shutdown": ({}, {}),
}
SAMPLING_FIELDS = tuple(REQUEST_FIELDS)
REPLY_REQUESTS = ("turn", "regenerate")  # the requests whose sampling fields are settings


def reply_options_problem(options: dict[str, object]) -> str | None:
    """What is wrong with a reply's settings (`turn`'s max_tokens and sampling fields), in
    the words the engine would refuse them with, or None: a front end checks a settings form
    with the engine's own ranges before it sends anything."""
    for name, value in options.items():
        spec = REPLY_OPTIONS.get(name)
        if spec is None:
            return f"unknown setting {name!r}"
        if _typed(value, spec.type) is None:
            return f"{name} must be {spec.type.__name__}, got {type(value).__name__}"
        problem = spec.check(value, Limits()) if spec.check else None
        if problem:
            return f"{name} {problem}"
    try:
        checked_overrides({k: v for k, v in options.items() if k in SAMPLING_FIELDS})
    except ValueError as exc:
        return str(exc)
    return None


class ProtocolError(ValueError):
    """A request line that cannot be served; the message names what was wrong."""

    def __init__(self, message: str, request_id=None):
        super().__init__(message)
        self.request_id = request_id


@dataclass(frozen=True)
class Request:
    type: str
    id: object = None  # echoed back as "req" on every event the request causes
    args: dict = field(default_factory=dict)
    # A reply's sampling settings as the request gave them, each checked; the engine lays
    # them over the model's defaults (empty: the defaults).
    settings: dict[str, float | int] | None = None

    @property
    def session(self) -> str | None:
        return self.args.get("session")


def parse_request(line: str | bytes, limits: Limits | None = None) -> Request:
    """Check one request line in full; raise ProtocolError naming the first problem."""
    limits = limits or Limits()
    record = _decode(line, limits)
    request_id = _request_id(record)
    kind = record.get("type")
    if not isinstance(kind, str):
        raise ProtocolError("missing 'type'", request_id)
    if kind not in REQUESTS:
        raise ProtocolError(f"unknown request type {kind!r}", request_id)
    required, optional = REQUESTS[kind]
    args = {}
    for name, spec in {**required, **optional}.items():
        if name not in record:
            if name in required:
                raise ProtocolError(f"{kind}: missing field {name!r}", request_id)
            continue
        value = _typed(record[name], spec.type)
        if value is None:
            raise ProtocolError(f"{kind}: field {name!r} must be {spec.type.__name__}, got "
                                f"{type(record[name]).__name__}", request_id)
        problem = spec.check(value, limits) if spec.check else None
        if problem:
            raise ProtocolError(f"{kind}: field {name!r} {problem}", request_id)
        args[name] = value
    unknown = set(record) - set(required) - set(optional) - {"id", "type"}
    if unknown:
        raise ProtocolError(f"{kind}: unknown field {min(unknown)!r}", request_id)
    settings = None
    if kind in REPLY_REQUESTS:
        try:
            settings = checked_overrides({k: args[k] for k in SAMPLING_FIELDS if k in args})
        except ValueError as exc:
            raise ProtocolError(f"{kind}: {exc}", request_id) from None
    return Request(kind, request_id, args, settings)


def _decode(line: str | bytes, limits: Limits) -> dict:
    if isinstance(line, str):
        if utf8_size(line) is None:
            raise ProtocolError("not valid UTF-8 (a lone surrogate)")
        line = line.encode("utf-8")
    if len(line) > limits.max_line_bytes:
        raise ProtocolError(f"request line longer than {limits.max_line_bytes} bytes")
    try:
        record = parse_json(decode_utf8(line))
    except ValueError as exc:
        raise ProtocolError(str(exc)) from None
    if not isinstance(record, dict):
        raise ProtocolError("a request must be a JSON object")
    return record


def _request_id(record: dict):
    """The request's id, or ProtocolError (not echoing an id that is itself bad)."""
    request_id = record.get("id")
    if request_id is None:
        return None
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
        raise ProtocolError("'id' must be a string or an integer")
    if isinstance(request_id, int) and abs(request_id) > MAX_INT_ID:
        raise ProtocolError(f"'id' must be a string or an integer from -{MAX_INT_ID} to "
                            f"{MAX_INT_ID}")
    problem = text_problem(request_id, MAX_NAME_BYTES) if isinstance(request_id, str) else None
    if problem:
        raise ProtocolError(f"'id' {problem}")
    return request_id


def _typed(value, expected: type):
    """`value` as `expected` (an integer is a valid float), or None if it is not one."""
    if isinstance(value, bool) and expected is not bool:
        return None
    if expected is float and isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return None
    return value if isinstance(value, expected) else None


def data_dir_problem(path: Path, make_private: bool = False) -> tuple[str | None, str | None]:
    """(why sessions cannot live in `path` or None, a note or None). Creates it, private, if
    missing; `make_private` also closes an existing one that others may read (the note says
    so). The engine refuses to start with the reason; the app checks first, so that a bad
    directory is one readable sentence rather than an engine that never answers."""
    note = None
    try:
        if make_private:
            note = ensure_private_dir(path)
        else:
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except FileExistsError:
        return f"data directory {path} is not a directory", None
    except PermissionError as exc:
        return f"data directory {path} {exc.strerror}", None
    except OSError as exc:
        return f"data directory {path} cannot be created: {exc.strerror or exc}", None
    if not path.is_dir():
        return f"data directory {path} is not a directory", None
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        return f"data directory {path} is not readable and writable", None
    return None, note


def encode_event(event: dict) -> str:
    """One event as a JSON line body. Events are valid UTF-8 whatever they carry: a string
    that cannot be encoded (a lone surrogate, from a bug upstream) is \\u-escaped instead of
    breaking the engine's stdout."""
    text = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    if utf8_size(text) is None:
        text = json.dumps(event, ensure_ascii=True, separators=(",", ":"))
    return text
