"""Valid Unicode: the check every string from outside passes before the engine uses it.

JSON's `\\ud800` escapes decode to lone surrogates, which are Python strings but not Unicode
text: UTF-8 cannot encode them, so stdout, files and the tokenizer all reject them, each in
its own way. Requests (process/protocol.py) and stream lines (session/stream.py) are refused
here first, with the field named.
"""

from __future__ import annotations


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
