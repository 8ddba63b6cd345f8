"""Text from outside: UTF-8, JSON and valid Unicode, each failure one ValueError naming why.

Requests (process/protocol.py) and stream lines (session/stream.py) are decoded here. JSON's
`\\ud800` escapes decode to lone surrogates, which are Python strings but not Unicode text:
UTF-8 cannot encode them, so stdout, files and the tokenizer all reject them, each in its own
way. Both callers refuse them first, with the field named.
"""

from __future__ import annotations

import json


def decode_utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset "
                         f"{exc.start})") from None


def parse_json(text: str) -> object:
    """json.loads, with each way it fails (nesting that overflows the parser, an integer too
    long to convert, ...) as one ValueError."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise ValueError("not valid JSON (nested too deeply)") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise ValueError(f"not valid JSON ({' '.join(str(exc).split())})") from None


def utf8_size(text: str) -> int | None:
    """Bytes of `text` in UTF-8; None if it holds a lone surrogate."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None


def lone_surrogate_in(value: object) -> bool:
    """Whether any string in a decoded JSON value (keys included) holds a lone surrogate.
    Iterative, so a value nested as deeply as json.loads allows cannot overflow the stack."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if utf8_size(item) is None:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
