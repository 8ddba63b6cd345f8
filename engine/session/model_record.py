"""Which model a session runs on: `<session>.model.json` beside its stream and snapshot.

A session is made on one model and stays on it: its replies were sampled from that model, its
stream's token ids are that model's, and its snapshot holds that model's keys and values. The
record is written when a session is first opened (or first opened since sessions began
recording their model) and names the GGUF's path, its fingerprint and its name. Reopening the
session uses the recorded model whatever model the engine or `channel chat` was started with;
a recorded file that is gone or has changed is refused with one line naming the path, never
replaced by another model.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import ChannelError
from ..fileio import open_regular, write_atomically
from ..model.gguf_file import fingerprint_file
from ..paths import SessionFiles

MAX_RECORD_BYTES = 64 << 10


class SessionModelError(ChannelError):
    """The session's recorded model cannot be used (gone, changed, or another was asked)."""


@dataclass(frozen=True)
class ModelRecord:
    path: str  # absolute
    fingerprint: str  # xxh3-128 of the file, as Model.fingerprint
    name: str


def record_path(data_dir: Path, session: str) -> Path:
    return SessionFiles(Path(data_dir), session).model_record


def read_record(data_dir: Path, session: str) -> ModelRecord | None:
    """The session's model record; None if it has none. A damaged record raises
    SessionModelError (it is never silently replaced: the session's model would change)."""
    path = record_path(data_dir, session)
    try:
        fd = open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_RECORD_BYTES + 1)
    try:
        record = json.loads(data) if len(data) <= MAX_RECORD_BYTES else None
    except ValueError:
        record = None
    fields = ("path", "fingerprint", "name")
    if not (isinstance(record, dict) and all(isinstance(record.get(k), str) for k in fields)):
        raise SessionModelError(f"session {session!r}: its model record {path.name} is "
                                f"damaged (fix or delete it to open the session on a model)")
    return ModelRecord(*(record[k] for k in fields))


def write_record(data_dir: Path, session: str, model_path: Path, fingerprint: str,
                 name: str) -> ModelRecord:
    """Record the session's model (atomically, private to the user)."""
    record = ModelRecord(str(Path(model_path).resolve()), fingerprint, name)
    # A session is recorded when first opened, before its stream has made the data directory.
    Path(data_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
    data = json.dumps(asdict(record), ensure_ascii=False).encode("utf-8") + b"\n"
    write_atomically(record_path(data_dir, session), data, permissions=0o600)
    return record


def same_file(a: str | Path, b: str | Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def check_recorded_model(record: ModelRecord, session: str) -> None:
    """Raise SessionModelError if the recorded file is gone or is no longer the same model."""
    path = Path(record.path)
    if not path.is_file():
        raise SessionModelError(f"session {session!r} runs on model {record.name!r}, whose "
                                f"file is gone: {path}")
    found = fingerprint_file(path)
    if found != record.fingerprint:
        raise SessionModelError(
            f"session {session!r} runs on model {record.name!r}, whose file has changed "
            f"(fingerprint {found[:12]}, recorded {record.fingerprint[:12]}): {path}")


def session_model(data_dir: Path, session: str, requested: Path | None = None,
                  ) -> ModelRecord | None:
    """The model session `session` must run on, checked; None for a session with no record
    (a new one). `requested` is a model asked for this session by name (an `open` request's
    `model`): a different recorded one is refused, as a session cannot change models."""
    record = read_record(data_dir, session)
    if record is None:
        return None
    if requested is not None and not same_file(requested, record.path):
        raise SessionModelError(
            f"session {session!r} runs on model {record.name!r} ({record.path}); open a new "
            f"session to use {requested}")
    check_recorded_model(record, session)
    return record
