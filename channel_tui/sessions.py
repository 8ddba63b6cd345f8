"""Sessions on disk, read the cheap way: file names, sizes, times and the stream's last line.

Listing `*.stream.jsonl` and `*.snapshot.bin` in the data directory is part of the documented
file layout (docs/stream.md), not engine internals.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from engine.paths import SessionFiles, tree_bytes
from engine.session.search import session_names

from .settings import load_settings, read_json_file, summary

TAIL_BYTES = 64 * 1024  # enough for the last few messages of any stream


@dataclass(frozen=True)
class SessionInfo:
    name: str
    last_message: str  # "role: first line" of the newest user/assistant event, or ""
    size_bytes: int  # stream, snapshot and its chain (segments, earlier generations)
    last_saved: float | None  # the snapshot's mtime, None when there is none
    last_active: float  # the newest mtime of its files
    settings: str = "model defaults"  # its reply settings, in brief (settings.summary)
    model: str = ""  # the model it runs on, from its model record ("" before its first open)


def list_sessions(data_dir: Path) -> list[SessionInfo]:
    """Every session in `data_dir`, most recently active first (unreadable dir: none)."""
    infos = [_info(data_dir, name) for name in session_names(data_dir)]
    return sorted(infos, key=lambda s: (-s.last_active, s.name))


def _info(data_dir: Path, name: str) -> SessionInfo:
    files = SessionFiles(data_dir, name)
    stream, snap = files.stream, files.snapshot
    size, last_saved, last_active = 0, None, 0.0
    for path in (stream, snap):
        try:
            st = path.stat()
        except OSError:
            continue
        size += st.st_size
        last_active = max(last_active, st.st_mtime)
        if path is snap:
            last_saved = st.st_mtime
    size += tree_bytes(files.snapshot_chain)
    with contextlib.suppress(OSError):  # a segment saved since the base: the newer save
        if last_saved is not None:
            last_saved = max(last_saved, files.snapshot_chain.stat().st_mtime)
    return SessionInfo(name, last_message(stream), size, last_saved, last_active,
                       summary(load_settings(data_dir, name)[0]), model_name(files))


def model_name(files: SessionFiles) -> str:
    """The name in the session's model record; "" when it has none or it is damaged (the
    engine says what is wrong with it when the session opens)."""
    record, _ = read_json_file(files.model_record)
    name = record.get("name") if isinstance(record, dict) else None
    return name if isinstance(name, str) else ""


def last_message(stream: Path) -> str:
    """The newest user or assistant message of a stream, as `role: first line`."""
    try:  # a FIFO or a link at the name must not block or redirect the session list
        fd = os.open(stream, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return ""
    try:
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return ""
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - TAIL_BYTES))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    for line in reversed(tail.splitlines()):
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line, or the cut-off first line of the tail
        if isinstance(event, dict) and event.get("role") in ("user", "assistant"):
            content = str(event.get("content", ""))
            # A \ud800 escape decodes to a lone surrogate, which no terminal can draw.
            content = content.encode("utf-8", "replace").decode("utf-8")
            text = content.strip().splitlines()
            who = "you" if event["role"] == "user" else "assistant"
            return f"{who}: {text[0] if text else ''}"
    return ""
