"""Ctrl+E: the transcript as a Markdown file."""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ChatMessage:
    """One transcript entry as the app keeps it (from `booted` or from a live turn)."""

    role: str
    content: str
    id: str | None = None
    ts: str | None = None
    stop: str | None = None
    stats: str = ""  # a reply's speed figures, as shown under it (format.reply_stats)


ROLE_TITLES = {"user": "You", "assistant": "Assistant", "system": "System prompt"}


def to_markdown(session: str, messages: list[ChatMessage], model: str | None = None) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"# Channel — session `{session}`", ""]
    lines += [f"_Exported {stamp}" + (f" · model {model}_" if model else "_"), ""]
    for message in messages:
        title = ROLE_TITLES.get(message.role, message.role)
        lines.append(f"## {title}" + (f" · {message.ts}" if message.ts else ""))
        lines.append("")
        if message.role == "system":
            lines += [f"> {line}" for line in message.content.splitlines() or [""]]
        else:
            lines.append(message.content)
        if message.stop == "cancelled":
            lines += ["", "_(reply cancelled)_"]
        elif message.stop == "withdrawn":  # the entry stands for the message above it
            lines += ["_(the message above was withdrawn: stopped while being read)_"]
        elif message.stop == "max_tokens":
            lines += ["", "_(reply cut at the token limit)_"]
        elif message.stop == "repetition":
            lines += ["", "_(reply stopped: it was repeating itself)_"]
        lines.append("")
    return "\n".join(lines)


def export_transcript(directory: Path, session: str, messages: list[ChatMessage],
                      model: str | None = None) -> Path:
    """Write `<session>-<UTC time>.md` in `directory`; never overwrite an earlier export.

    The file is private (0600), like the conversation it copies, and created exclusively: an
    existing file, or a link planted at its name, is never written through.
    """
    directory.mkdir(parents=True, exist_ok=True)
    base = f"{session}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    data = to_markdown(session, messages, model).encode("utf-8", "replace")
    for n in itertools.count(1):
        path = directory / (f"{base}.md" if n == 1 else f"{base}-{n}.md")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return path
    raise AssertionError("unreachable")
