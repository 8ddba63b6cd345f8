"""`channel sessions list|rename|delete|restore|trash|empty-trash|search` on real session
files, and a real engine holding a session to show the one-line refusal."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from channel_cli.cli import main
from engine.session.stream import StreamLog


def run(capsys, data: Path, *argv: str) -> tuple[int, list[str], list[str]]:
    code = main(["sessions", *argv, "--data-dir", str(data)])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def make(data: Path, name: str, *messages: str, model: str | None = None) -> None:
    log = StreamLog(data / f"{name}.stream.jsonl")
    for i, text in enumerate(messages):
        log.append("user" if i % 2 == 0 else "assistant", text)
    if model:
        (data / f"{name}.model.json").write_text(json.dumps(
            {"path": "/models/x.gguf", "fingerprint": "f" * 32, "name": model}))


def test_list_shows_model_size_and_last_message(capsys, tmp_path) -> None:
    make(tmp_path, "alpha", "hi", "hello there, friend", model="SmolLM2-135M")
    make(tmp_path, "beta", "just one")
    code, out, err = run(capsys, tmp_path, "list", "--json")
    assert code == 0 and err == []
    rows = {row["name"]: row for row in map(json.loads, out)}
    assert rows["alpha"]["model"] == "SmolLM2-135M" and rows["beta"]["model"] is None
    assert rows["alpha"]["last_message"] == "assistant: hello there, friend"
    assert rows["alpha"]["size_bytes"] == (tmp_path / "alpha.stream.jsonl").stat().st_size
    assert rows["alpha"]["last_saved"] is None  # no snapshot yet
    code, out, _ = run(capsys, tmp_path, "list")
    assert out[0].split() == ["NAME", "MODEL", "SIZE", "SAVED", "LAST", "MESSAGE"]
    alpha = next(line for line in out if line.startswith("alpha"))
    assert "SmolLM2-135M" in alpha and "never" in alpha and "hello there, friend" in alpha


def test_rename_delete_restore_and_search(capsys, tmp_path) -> None:
    make(tmp_path, "alpha", "plan the garden", "Plant tomatoes in May.")
    make(tmp_path, "beta", "nothing here")
    assert run(capsys, tmp_path, "rename", "alpha", "garden")[:2] == (
        0, ["renamed 'alpha' to 'garden'"])
    assert (tmp_path / "garden.stream.jsonl").exists()
    code, out, err = run(capsys, tmp_path, "rename", "garden", "beta")
    assert code == 2 and out == [] and err == ["channel: error: session 'beta' already exists"]
    code, out, err = run(capsys, tmp_path, "rename", "garden", "no/slash")
    assert code == 2 and len(err) == 1 and "invalid session name 'no/slash'" in err[0]

    code, out, _ = run(capsys, tmp_path, "search", "TOMATOES", "--json")
    assert [json.loads(line) for line in out] == [
        {"session": "garden", "where": "assistant", "excerpt": "Plant tomatoes in May."}]
    assert run(capsys, tmp_path, "search", "bet")[1] == ["beta: (its name)"]
    assert run(capsys, tmp_path, "search", "zebra")[1] == ["no session holds 'zebra'"]

    code, out, _ = run(capsys, tmp_path, "delete", "garden")
    assert code == 0 and not (tmp_path / "garden.stream.jsonl").exists()
    entry = out[1].removeprefix("undo with: channel sessions restore ")
    assert out[0] == f"deleted 'garden': its files are in {tmp_path / '.trash' / entry}"
    trash = [json.loads(line) for line in run(capsys, tmp_path, "trash", "--json")[1]]
    assert [(t["entry"], t["name"]) for t in trash] == [(entry, "garden")]
    code, out, err = run(capsys, tmp_path, "delete", "garden")
    assert code == 2 and err == [f"channel: error: no session 'garden' in {tmp_path}"]
    assert run(capsys, tmp_path, "undelete", entry)[:2] == (
        0, [f"restored 'garden' from {entry}"])
    assert "Plant tomatoes" in (tmp_path / "garden.stream.jsonl").read_text()
    assert run(capsys, tmp_path, "trash")[1] == ["the trash is empty"]


def test_empty_trash_deletes_for_good_what_is_old_enough(capsys, tmp_path) -> None:
    for name in ("old", "new"):
        make(tmp_path, name, f"the {name} one")
        assert run(capsys, tmp_path, "delete", name)[0] == 0
    entries = {t["name"]: t["entry"] for t in
               map(json.loads, run(capsys, tmp_path, "trash", "--json")[1])}
    month_ago = time.time() - 30 * 86400
    os.utime(tmp_path / ".trash" / entries["old"], (month_ago, month_ago))

    code, out, _ = run(capsys, tmp_path, "empty-trash", "--older-than", "7")
    assert code == 0 and len(out) == 1 and out[0].startswith(f"removed {entries['old']}  old")
    assert not (tmp_path / ".trash" / entries["old"]).exists()
    assert run(capsys, tmp_path, "empty-trash", "--older-than", "7")[1] == ["nothing to remove"]
    code, _, err = run(capsys, tmp_path, "empty-trash", "--older-than", "-1")
    assert code == 2 and err == ["channel: error: --older-than must be 0 or more days, not -1"]
    assert (tmp_path / ".trash" / entries["new"]).exists()  # refused: nothing removed

    assert run(capsys, tmp_path, "empty-trash")[1][0].startswith(f"removed {entries['new']}")
    assert run(capsys, tmp_path, "trash")[1] == ["the trash is empty"]
    assert run(capsys, tmp_path, "list")[0] == 0  # the data directory itself is untouched


def test_a_session_open_in_an_engine_is_refused_in_one_line(capsys, engine, tmp_path) -> None:
    data = tmp_path / "data"
    holder = engine(data_dir=data)
    holder.request({"type": "open", "session": "s"}, "booted")
    holder.request({"type": "turn", "session": "s", "text": "hi", "max_tokens": 2},
                   "end_of_turn")
    busy = f"channel: error: session 's' is open in another Channel (pid {holder.proc.pid})"
    for argv in (("rename", "s", "t"), ("delete", "s")):
        code, out, err = run(capsys, data, *argv)
        assert code == 2 and out == [] and err == [busy]
    assert (data / "s.stream.jsonl").exists() and not (data / "t.stream.jsonl").exists()
    holder.request({"type": "close", "session": "s"}, "closed")
    assert run(capsys, data, "rename", "s", "t")[0] == 0  # closed: its lock went with it
    assert "hi" in (data / "t.stream.jsonl").read_text()
