"""A session's reply settings: the few sampling fields and max_tokens the settings screen
(F6) edits, kept in `<session>.settings.json` beside the model record and sent with every
`turn` and `regenerate` of that session.

A setting left out is the model's default (the GGUF's recommended values, else llama.cpp's:
docs/protocol.md, "Sampling"); max_tokens left out is the app's (--max-tokens). Values are
checked with the engine's own ranges (`reply_options_problem`), so a form never sends what
the engine would refuse, and a hand-edited file with a bad value loses that value only.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from engine.paths import SessionFiles
from engine.process.protocol import reply_options_problem

MAX_FILE_BYTES = 64 << 10  # a settings file is a few dozen bytes; refuse to read a huge one


@dataclass(frozen=True)
class SettingField:
    name: str  # the request field
    label: str  # what the form calls it
    short: str  # what the session list calls it
    kind: type  # float or int
    hint: str  # the range, in words, under the input


# The fields the settings screen edits, in the order it shows them.
FIELDS: tuple[SettingField, ...] = (
    SettingField("temperature", "Temperature", "t", float,
                 "0 is greedy (always the likeliest token); 0.0001 to 100"),
    SettingField("top_p", "Top-p", "top-p", float, "above 0, up to 1 (1 is off)"),
    SettingField("min_p", "Min-p", "min-p", float, "0 to 1 (0 is off)"),
    SettingField("repeat_penalty", "Repetition penalty", "rep", float,
                 "above 0, up to 10 (1 is off)"),
    SettingField("max_tokens", "Max tokens per reply", "max", int,
                 "0 to 65536; empty: the app's limit"),
)
FIELD_NAMES = tuple(f.name for f in FIELDS)
Settings = dict[str, float | int]  # only the fields that are set


def parse_field(spec: SettingField, text: str) -> tuple[float | int | None, str | None]:
    """(the value typed, or None for empty: the default; the one-line problem or None)."""
    text = text.strip()
    if not text:
        return None, None
    try:
        value: float | int = spec.kind(text)
    except ValueError:
        kind = "a whole number" if spec.kind is int else "a number"
        return None, f"{spec.label} must be {kind}, got {text!r}"
    problem = reply_options_problem({spec.name: value})
    return (None, f"{spec.label}: {problem}") if problem else (value, None)


def checked(raw: object) -> tuple[Settings, list[str]]:
    """The valid known fields of a settings record, and one line per value dropped."""
    if not isinstance(raw, dict):
        return {}, ["the settings file does not hold a JSON object"]
    kept: Settings = {}
    dropped: list[str] = []
    for name in FIELD_NAMES:
        if name not in raw:
            continue
        problem = reply_options_problem({name: raw[name]})
        if problem is None:
            value = raw[name]
            kept[name] = float(value) if isinstance(value, int) and name != "max_tokens" \
                else value
        else:
            dropped.append(problem)
    return kept, dropped


def load_settings(data_dir: Path, session: str) -> tuple[Settings, list[str]]:
    """The session's saved settings (none saved: {}), and what was wrong with the file."""
    raw, problem = read_json_file(SessionFiles(data_dir, session).settings)
    if problem is not None:
        return {}, [problem]
    return ({}, []) if raw is None else checked(raw)


def save_settings(data_dir: Path, session: str, settings: Settings) -> Path:
    """Write the settings atomically; OSError when the data directory refuses."""
    path = SessionFiles(data_dir, session).settings
    write_json_atomic(path, {k: settings[k] for k in FIELD_NAMES if k in settings})
    return path


def read_json_file(path: Path) -> tuple[object, str | None]:
    """A small JSON file's value (absent: None), and what was wrong with it, if anything."""
    try:  # a FIFO or a link at the name must not block or redirect the app
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot read {path.name}: {exc.strerror or exc}"
    try:
        with os.fdopen(fd, "rb") as f:
            return json.loads(f.read(MAX_FILE_BYTES + 1)[:MAX_FILE_BYTES] or b"null"), None
    except (OSError, ValueError) as exc:
        return None, f"{path.name} is not readable JSON ({exc}); using the defaults"


def write_json_atomic(path: Path, value: object) -> None:
    """Write `value` as JSON through a temporary file (fsynced, then renamed), readable
    only by the user; OSError when the directory refuses."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = (json.dumps(value, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def summary(settings: Settings) -> str:
    """One short line for the session list: 't 0.7 · top-p 0.9', or 'model defaults'."""
    parts = [f"{f.short} {settings[f.name]:g}" for f in FIELDS if f.name in settings]
    return " · ".join(parts) if parts else "model defaults"


def request_fields(settings: Settings, base_sampling: Settings, base_max_tokens: int) -> dict:
    """What a `turn` or `regenerate` carries: the app's options, overlaid with the
    session's settings."""
    fields: dict[str, float | int] = {"max_tokens": base_max_tokens, **base_sampling}
    fields.update(settings)
    return fields
