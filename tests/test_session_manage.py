"""Issue 30, item 3: sessions renamed, deleted to the trash and restored, as files
(engine/session/manage.py), on real sessions of the tiny model (searched:
test_session_search.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import SessionBusyError
from engine.session.manage import (
    SessionFilesError,
    delete_session,
    list_trash,
    rename_session,
    restore_deleted,
)
from engine.session.owner import acquire_session
from engine.session.session import Session
from engine.session.stream import StreamLog
from engine.state.ring_policy import RingPolicy
from engine.state.sampler import SamplingSettings

REPO = Path(__file__).resolve().parent.parent
POLICY = RingPolicy().scaled_to(256)
SUFFIXES = (".stream.jsonl", ".snapshot.bin", ".model.json", ".settings.json")


def stored(data_dir: Path, name: str, text: str = "hello") -> None:
    """A session on disk with every kind of file (no model needed for file operations)."""
    StreamLog(data_dir / f"{name}.stream.jsonl").append("user", text)
    for suffix, body in ((".snapshot.bin", b"snap"), (".model.json", b"{}"),
                         (".settings.json", b'{"temperature": 0.5}')):
        (data_dir / f"{name}{suffix}").write_bytes(body)


def files_of(data_dir: Path, name: str) -> dict[str, bytes]:
    return {s: (data_dir / f"{name}{s}").read_bytes() for s in SUFFIXES
            if (data_dir / f"{name}{s}").exists()}


def test_a_renamed_session_keeps_every_file_and_boots_warm(tiny_model, tmp_path) -> None:
    session = Session(tiny_model, tmp_path, "old", POLICY)
    session.open()
    session.turn("remember the word teapot", SamplingSettings(), max_tokens=4)
    session.save(wait=True)
    clock = session.conversation.ring.clock
    session.close()
    (tmp_path / "old.settings.json").write_text('{"top_p": 0.9}')
    before = files_of(tmp_path, "old")
    rename_session(tmp_path, "old", "new")
    assert files_of(tmp_path, "new") == before and files_of(tmp_path, "old") == {}
    # The snapshot's identity names "old" only as information: the stream's ids decide.
    renamed = Session(tiny_model, tmp_path, "new", POLICY)
    report = renamed.boot()
    assert report.kind == "warm" and report.replayed_events == 0, report.reason
    assert renamed.conversation.ring.clock == clock
    renamed.close()


def test_rename_refuses_bad_names_a_taken_name_and_a_held_session(tmp_path) -> None:
    stored(tmp_path, "a")
    stored(tmp_path, "b", "other")
    before = {n: files_of(tmp_path, n) for n in ("a", "b")}
    with pytest.raises(ValueError, match="session 'b' already exists"):
        rename_session(tmp_path, "a", "b")
    with pytest.raises(ValueError, match="invalid session name '../x'"):
        rename_session(tmp_path, "a", "../x")
    with pytest.raises(ValueError, match="no session 'zz'"):
        rename_session(tmp_path, "zz", "c")
    with acquire_session(tmp_path, "a"), pytest.raises(SessionBusyError) as busy:
        rename_session(tmp_path, "a", "c")
    assert str(busy.value) == f"session 'a' is open in another Channel (pid {os.getpid()})"
    with acquire_session(tmp_path, "c"), pytest.raises(SessionBusyError):
        rename_session(tmp_path, "a", "c")  # nor onto a name someone has open, still empty
    assert {n: files_of(tmp_path, n) for n in ("a", "b")} == before
    assert files_of(tmp_path, "c") == {}


def test_a_failed_move_leaves_the_session_whole_under_its_name(tmp_path, monkeypatch) -> None:
    stored(tmp_path, "a")
    before = files_of(tmp_path, "a")
    real_rename = os.rename

    def failing(src, dst):  # the stream's move fails, after the others went
        if str(src).endswith(".stream.jsonl") and "a.stream" in str(src):
            raise OSError(28, "No space left on device")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", failing)
    with pytest.raises(SessionFilesError, match="cannot rename 'a' to 'c': No space left"):
        rename_session(tmp_path, "a", "c")
    with pytest.raises(SessionFilesError, match="cannot delete 'a'"):
        delete_session(tmp_path, "a")
    monkeypatch.undo()
    assert files_of(tmp_path, "a") == before and files_of(tmp_path, "c") == {}
    assert list_trash(tmp_path) == []
    assert list((tmp_path / ".trash").iterdir()) == []  # its folder went too


def test_delete_where_no_trash_can_be_made_is_one_line_and_keeps_all(tmp_path,
                                                                     monkeypatch) -> None:
    stored(tmp_path, "a")
    before = files_of(tmp_path, "a")

    real_mkdir = Path.mkdir

    def read_only(self, *args, **kwargs):  # as a read-only file system answers
        if self.name == ".trash":
            raise OSError(30, "Read-only file system")
        real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(SessionFilesError) as refused:
        delete_session(tmp_path, "a")
    monkeypatch.undo()
    assert str(refused.value) == (f"cannot delete 'a': {tmp_path / '.trash'}: "
                                  f"Read-only file system")
    assert files_of(tmp_path, "a") == before


def test_delete_goes_to_the_trash_and_restore_brings_it_back(tmp_path) -> None:
    stored(tmp_path, "a")
    before = files_of(tmp_path, "a")
    entry = delete_session(tmp_path, "a")
    assert files_of(tmp_path, "a") == {}
    assert entry.path.parent == tmp_path / ".trash" and entry.name == "a"
    assert entry.entry.startswith("a-") and files_of(entry.path, "a") == before
    assert entry.size_bytes == sum(len(b) for b in before.values())
    assert (tmp_path / "a.lock").exists()  # never moved: an opener may hold it
    stored(tmp_path, "a", "a new one")  # deleted twice within a second: two entries
    second = delete_session(tmp_path, "a")
    assert [e.entry for e in list_trash(tmp_path)] in ([second.entry, entry.entry],
                                                      [entry.entry, second.entry])
    assert second.entry != entry.entry
    stored(tmp_path, "a", "taken again")
    with pytest.raises(ValueError, match="session 'a' exists again"):
        restore_deleted(tmp_path, entry.entry)
    delete_session(tmp_path, "a")
    assert restore_deleted(tmp_path, entry.entry) == "a"
    assert files_of(tmp_path, "a") == before and not entry.path.exists()
    with pytest.raises(ValueError, match="no deleted session 'nothing'"):
        restore_deleted(tmp_path, "nothing")
    with pytest.raises(ValueError, match="no session 'gone'"):
        delete_session(tmp_path, "gone")


def test_the_front_end_may_import_it_without_numpy() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, engine.session.manage; print('numpy' in sys.modules)"],
        capture_output=True, text=True, cwd=REPO, check=True)
    assert loaded.stdout.strip() == "False"
