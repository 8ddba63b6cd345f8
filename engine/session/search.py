"""Searching the sessions' names and messages: `channel sessions search` and the sessions
list's search line.

The list searches again at every keystroke, and reading every stream each time cost 280 ms
for 40 sessions of 400 messages (9 MB). So while the list is open it keeps the messages of
each stream read (StreamTexts), with the file's identity and the offset read up to. A stream
only ever grows (appends; a rewind appends a retraction; a failed append is cut back to
where it was), so a stream that grew is read from that offset on, and any other change (a
file of another identity at the path, or one shorter than what was read) is read again
from the start.

Only os, threading and the stream reader are used: the front end imports this module
(tests/test_import_floors.py) without loading numpy.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ChannelError
from ..paths import SNAPSHOT_SUFFIX, STREAM_SUFFIX, SessionFiles, session_name_problem
from .stream import StreamLog

EXCERPT_CHARS = 60  # of a matching message, around the match

Message = tuple[str, str, str]  # role, content, content casefolded


@dataclass(frozen=True)
class SearchHit:
    session: str
    where: str  # "name" or the matching message's role ("user", "assistant", "system")
    excerpt: str  # one line around the match; for a name match, ""


@dataclass
class _StreamRead:
    identity: tuple[int, int]  # st_dev, st_ino of the file read
    log: StreamLog  # resumes from `end` (it remembers the ids before it)
    end: int = 0  # bytes read
    messages: list[Message] = field(default_factory=list)


class StreamTexts:
    """The messages of streams read before, brought up to date from where each was read."""

    def __init__(self) -> None:
        self._reads: dict[Path, _StreamRead] = {}
        self._lock = threading.Lock()  # the list's search threads may overlap

    def messages(self, path: Path) -> list[Message]:
        """The stream's messages, oldest first; OSError or ChannelError if it is unreadable."""
        st = os.stat(path)
        identity = (st.st_dev, st.st_ino)
        with self._lock:
            read = self._reads.get(path)
            if read is None or read.identity != identity or st.st_size < read.end:
                read = _StreamRead(identity, StreamLog(path))
            if st.st_size > read.end or read.end == 0:
                got = read.log.read(read.end)
                read.messages.extend((e.role, e.content, e.content.casefold())
                                     for e in got.events)
                read.end = got.end_offset
            self._reads[path] = read
            return read.messages

    def keep_only(self, paths: set[Path]) -> None:
        """Forget the streams not in `paths` (deleted or renamed sessions)."""
        with self._lock:
            for path in set(self._reads) - paths:
                del self._reads[path]


def search_sessions(data_dir: Path, text: str, width: int = EXCERPT_CHARS,
                    texts: StreamTexts | None = None) -> list[SearchHit]:
    """Sessions whose name or any message holds `text` (case-insensitive), one hit each:
    the name if it matches, else the newest matching message, as an excerpt of about
    `width` characters around the match. `texts`: what earlier searches read (the sessions
    list keeps one while it is open; None reads every stream)."""
    texts = texts if texts is not None else StreamTexts()
    needle = text.strip().casefold()
    if not needle:
        return []
    hits, searched = [], set()
    for name in session_names(Path(data_dir)):
        if needle in name.casefold():
            hits.append(SearchHit(name, "name", ""))
            continue
        path = SessionFiles(Path(data_dir), name).stream
        searched.add(path)
        try:
            messages = texts.messages(path)
        except (ChannelError, OSError):
            continue  # unreadable: not a match, and the list still shows the others
        for role, content, folded in reversed(messages):
            at = folded.find(needle)
            if at >= 0:
                hits.append(SearchHit(name, role, excerpt(content, at, len(needle), width)))
                break
    texts.keep_only(searched)
    return hits


def excerpt(content: str, at: int, length: int, width: int = EXCERPT_CHARS) -> str:
    """One line of `content` around content[at:at+length], '…' where it was cut; at most
    `width` characters in all."""
    if len(content) > width:
        width = max(length, width - 2)  # room for the two '…'
    start = max(0, at - (width - length) // 2)
    end = min(len(content), start + width)
    start = max(0, end - width)
    piece = " ".join(content[start:end].split())
    return ("…" if start > 0 else "") + piece + ("…" if end < len(content) else "")


def session_names(data_dir: Path) -> list[str]:
    """The sessions in `data_dir`: those with a stream or a snapshot, sorted."""
    try:
        names = os.listdir(data_dir)
    except OSError:
        return []
    found = {n[: -len(suffix)] for n in names for suffix in (STREAM_SUFFIX, SNAPSHOT_SUFFIX)
             if n.endswith(suffix)}
    return sorted(n for n in found if session_name_problem(n) is None)
