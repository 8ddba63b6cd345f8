"""The stream write-ahead log: durability, privacy, monotonic ULIDs and forgiving reads."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ulid import ULID

from engine.session.stream import StreamLog, parse_event


def test_append_is_private_and_ids_are_monotonic(tmp_path: Path) -> None:
    log = StreamLog(tmp_path / "sessions" / "s.stream.jsonl")
    events = [log.append("user", f"message {i}") for i in range(200)]
    assert stat.S_IMODE(log.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(log.path.parent.stat().st_mode) == 0o700
    ids = [ULID.from_str(e.id) for e in events]
    assert all(int(a) < int(b) for a, b in zip(ids, ids[1:]))
    read = log.read()
    assert [e.content for e in read.events] == [f"message {i}" for i in range(200)]
    assert read.warnings == []
    record = json.loads(log.path.read_text().splitlines()[0])
    assert set(record) >= {"id", "role", "content", "ts"} and record["ts"].endswith("Z")


def test_monotonic_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "s.stream.jsonl"
    first = StreamLog(path)
    last = [first.append("user", "a") for _ in range(5)][-1]
    second = StreamLog(path)
    second.read()
    assert int(ULID.from_str(second.append("user", "b").id)) > int(ULID.from_str(last.id))


def test_torn_last_line_is_skipped_kept_and_not_glued(tmp_path: Path) -> None:
    log = StreamLog(tmp_path / "s.stream.jsonl")
    log.append("user", "one")
    log.append("assistant", "two")
    with open(log.path, "ab") as f:
        f.write(b'{"id": "01J0000000000000000000000", "role": "us')  # a crash mid-write
    read = log.read()
    assert [e.content for e in read.events] == ["one", "two"]
    assert len(read.warnings) == 1 and "line 3: torn last line" in read.warnings[0]
    log.append("user", "three")
    text = log.path.read_text()
    assert '"role": "us\n' in text  # the fragment is kept as its own line, never deleted
    read = log.read()
    assert [e.content for e in read.events] == ["one", "two", "three"]
    assert len(read.warnings) == 1 and "line 3: skipped, not valid JSON" in read.warnings[0]


def test_bad_lines_are_reported_with_their_number(tmp_path: Path) -> None:
    log = StreamLog(tmp_path / "s.stream.jsonl")
    good = log.append("user", "fine")
    lines = [
        good.to_json(),
        "[1, 2, 3]",
        json.dumps({"id": good.id, "role": "user", "ts": "x"}),
        json.dumps({"id": good.id, "role": "robot", "content": "x", "ts": "x"}),
        json.dumps({"id": "not-a-ulid", "role": "user", "content": "x", "ts": "x"}),
        "",
        good.to_json(),
    ]
    log.path.write_text("\n".join(lines) + "\n")
    read = log.read()
    assert len(read.events) == 2
    reasons = "\n".join(read.warnings)
    assert "line 2: skipped, not a JSON object" in reasons
    assert "line 3: skipped, missing field content" in reasons
    assert "line 4: skipped, unknown role 'robot'" in reasons
    assert "line 5: skipped, id 'not-a-ulid' is not a ULID" in reasons


def test_read_from_an_offset_resumes_where_it_left(tmp_path: Path) -> None:
    log = StreamLog(tmp_path / "s.stream.jsonl")
    log.append("user", "a")
    first = log.read()
    log.append("user", "b")
    rest = log.read(first.end_offset)
    assert [e.content for e in rest.events] == ["b"]


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage=st.lists(st.binary(max_size=80), max_size=8))
def test_reading_arbitrary_bytes_never_raises(tmp_path: Path, garbage: list[bytes]) -> None:
    log = StreamLog(tmp_path / "fuzz.stream.jsonl")
    log.path.unlink(missing_ok=True)
    kept = log.append("user", "kept")
    with open(log.path, "ab") as f:
        f.write(b"\n".join(garbage))
    read = log.read()
    assert read.events[0] == kept
    for event in read.events:
        assert parse_event(event.to_json()) == event


def test_concurrent_appenders_keep_ids_in_file_order(tmp_path: Path) -> None:
    path = tmp_path / "s.stream.jsonl"
    script = ("import sys; from engine.session.stream import StreamLog; "
              "log = StreamLog(sys.argv[1]); "
              "[log.append('user', f'{sys.argv[2]} {i}') for i in range(150)]")
    writers = [subprocess.Popen([sys.executable, "-c", script, str(path), name])
               for name in ("a", "b", "c")]
    assert all(w.wait(60) == 0 for w in writers)
    read = StreamLog(path).read()
    assert len(read.events) == 450 and read.warnings == [] and read.disorder == {}
    ids = [int(ULID.from_str(e.id)) for e in read.events]
    assert ids == sorted(ids) and len(set(ids)) == 450
