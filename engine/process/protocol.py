"""The engine's line-delimited JSON protocol (docs/protocol.md): request parsing and checks.

Every request is one JSON object per line on the engine's stdin; every event one JSON object
per line on its stdout. This module turns a line into a validated Request or raises
ProtocolError with a one-line reason; it imports nothing heavy, so clients may use it too.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

PROTOCOL_VERSION = 1
# `--backend` of the engine process (and of `channel`, which passes it on): backends/select.py.
BACKEND_CHOICES = ("auto", "ggml", "numpy", "vulkan")
MAX_LINE_BYTES = 1 << 20  # a request larger than this is refused, not parsed

# Request type -> (required fields, optional fields with their types)
REQUESTS: dict[str, tuple[dict[str, type], dict[str, type]]] = {
    "hello": ({}, {"client": str, "protocol": int}),
    "open": ({"session": str}, {"cold": bool}),
    "turn": ({"session": str, "text": str},
             {"max_tokens": int, "temperature": float, "top_k": int, "top_p": float,
              "seed": int}),
    "cancel": ({"session": str}, {}),
    "save": ({"session": str}, {}),
    "restore": ({"session": str}, {}),
    "stats": ({}, {"session": str}),
    "boot_compare": ({"session": str}, {}),
    "close": ({"session": str}, {}),
    "shutdown": ({}, {}),
}


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

    @property
    def session(self) -> str | None:
        return self.args.get("session")


def parse_request(line: str | bytes) -> Request:
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError(f"request line longer than {MAX_LINE_BYTES} bytes")
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"not valid JSON ({getattr(exc, 'msg', exc)})") from None
    if not isinstance(record, dict):
        raise ProtocolError("a request must be a JSON object")
    request_id = record.get("id")
    if request_id is not None and not isinstance(request_id, (str, int)):
        raise ProtocolError("'id' must be a string or an integer")
    kind = record.get("type")
    if not isinstance(kind, str):
        raise ProtocolError("missing 'type'", request_id)
    if kind not in REQUESTS:
        raise ProtocolError(f"unknown request type {kind!r}", request_id)
    required, optional = REQUESTS[kind]
    args = {}
    for name, expected in {**required, **optional}.items():
        if name not in record:
            if name in required:
                raise ProtocolError(f"{kind}: missing field {name!r}", request_id)
            continue
        value = record[name]
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise ProtocolError(
                f"{kind}: field {name!r} must be {expected.__name__}, got {type(value).__name__}",
                request_id,
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise ProtocolError(f"{kind}: field {name!r} must be finite", request_id)
        args[name] = value
    unknown = set(record) - set(required) - set(optional) - {"id", "type"}
    if unknown:
        raise ProtocolError(f"{kind}: unknown field {sorted(unknown)[0]!r}", request_id)
    return Request(kind, request_id, args)


def encode_event(event: dict) -> str:
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))
