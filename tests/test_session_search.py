"""Searching sessions by name and message text (engine/session/search.py), and the kept
messages that spare each keystroke of the sessions list a read of every stream."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from engine.session.search import StreamTexts, excerpt, search_sessions
from engine.session.stream import StreamLog

REPO = Path(__file__).resolve().parent.parent


def test_search_finds_names_and_message_text_with_an_excerpt(tmp_path) -> None:
    StreamLog(tmp_path / "recipes.stream.jsonl").append("user", "how long to boil an egg")
    log = StreamLog(tmp_path / "work.stream.jsonl")
    log.append("user", "draft the quarterly report " + "and more words " * 10)
    log.append("assistant", "Here is the Quarterly REPORT you asked for, with figures.")
    hits = search_sessions(tmp_path, "quarterly report", texts=StreamTexts())
    assert [(h.session, h.where) for h in hits] == [("work", "assistant")]
    assert hits[0].excerpt == "Here is the Quarterly REPORT you asked for, with figures."
    assert [(h.session, h.where, h.excerpt) for h in search_sessions(tmp_path, "RECIP")] == [
        ("recipes", "name", "")]
    assert search_sessions(tmp_path, "nowhere") == [] and search_sessions(tmp_path, " ") == []
    long = "x" * 100 + "needle" + "y" * 100
    cut = excerpt(long, 100, 6, width=20)
    assert cut.startswith("…") and cut.endswith("…") and "needle" in cut and len(cut) == 20


def test_a_stream_that_grew_is_read_from_where_the_last_search_stopped(tmp_path) -> None:
    texts, path = StreamTexts(), tmp_path / "chat.stream.jsonl"
    log = StreamLog(path)
    log.append("user", "the first question")
    assert search_sessions(tmp_path, "second", texts=texts) == []
    kept = texts.messages(path)
    log.append("assistant", "the second answer")
    hits = search_sessions(tmp_path, "second", texts=texts)
    assert [(h.session, h.where) for h in hits] == [("chat", "assistant")]
    assert texts.messages(path) is kept and len(kept) == 2  # extended, not read again
    with path.open("ab") as f:  # a live engine's append, half written so far
        f.write(b'{"id": "01J')
    assert [m[1] for m in texts.messages(path)] == ["the first question", "the second answer"]


def test_a_stream_replaced_or_cut_short_is_read_again(tmp_path) -> None:
    texts, path = StreamTexts(), tmp_path / "chat.stream.jsonl"
    StreamLog(path).append("user", "an apple a day " * 20)
    assert search_sessions(tmp_path, "apple", texts=texts)
    other = tmp_path / "elsewhere.jsonl"
    StreamLog(other).append("user", "a pear")
    os.replace(other, path)  # another file at the path: longer or not, another identity
    assert search_sessions(tmp_path, "apple", texts=texts) == []
    assert [h.session for h in search_sessions(tmp_path, "pear", texts=texts)] == ["chat"]
    with path.open("r+b") as f:  # shorter than what was read: from the start again
        f.truncate(0)
    StreamLog(path).append("user", "fig")
    assert search_sessions(tmp_path, "pear", texts=texts) == []
    assert search_sessions(tmp_path, "fig", texts=texts)


def test_deleted_sessions_are_forgotten_and_bad_lines_found_nothing(tmp_path) -> None:
    texts = StreamTexts()
    for name in ("a", "b"):
        StreamLog(tmp_path / f"{name}.stream.jsonl").append("user", f"hello from {name}")
    assert len(search_sessions(tmp_path, "hello", texts=texts)) == 2
    (tmp_path / "a.stream.jsonl").unlink()
    (tmp_path / "b.stream.jsonl").write_bytes(b"\xff\xfe not a stream\n")
    (tmp_path / "c.snapshot.bin").write_bytes(b"")  # a snapshot without its stream
    assert search_sessions(tmp_path, "hello", texts=texts) == []
    assert set(texts._reads) == {tmp_path / "b.stream.jsonl"}


def test_the_front_end_may_import_it_without_numpy() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, engine.session.search; print('numpy' in sys.modules)"],
        capture_output=True, text=True, cwd=REPO, check=True)
    assert loaded.stdout.strip() == "False"
