"""Snapshot chains as sessions live with them: saves that write segments, warm boots that
apply them, a damaged segment set aside with a warning, and the session's other files
(fork, rename, delete, verify, inspect) carrying the chain along."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.paths import SessionFiles
from engine.process.client import spawn
from engine.session.fork import fork_session
from engine.session.manage import delete_session, rename_session, restore_deleted
from engine.session.session import Session
from engine.session.verify import verify_session
from engine.snapshot.archive import generations
from engine.snapshot.inspect import inspect_snapshot, render_inspection
from engine.state.ring_policy import RingPolicy

from .test_snapshot import GREEDY, assert_same_state, live_state

POLICY = RingPolicy().scaled_to(256)


def chained_session(model, data_dir: Path, name: str = "s", turns: int = 3) -> Session:
    """A session saved whole after its first turn, then once per turn as a segment."""
    s = Session(model, data_dir, name, POLICY)
    s.snapshots.compact_share = 8.0  # a tiny ring's base is small next to a turn
    s.boot()
    s.turn("hello there", GREEDY, max_tokens=5)
    assert s.save().kind == "full"
    for i in range(turns):
        s.turn(f"question number {i}", GREEDY, max_tokens=5)
        result = s.save()
        assert (result.kind, result.status.name) == ("segment", "SAVED")
    return s


def reopened(model, data_dir: Path, name: str = "s") -> tuple[Session, object]:
    s = Session(model, data_dir, name, POLICY)
    s.snapshots.compact_share = 8.0
    return s, s.boot()


def test_a_warm_boot_applies_the_chain_and_the_next_save_extends_it(tiny_model,
                                                                    tmp_path) -> None:
    live = chained_session(tiny_model, tmp_path)
    live.close()
    again, report = reopened(tiny_model, tmp_path)
    assert (report.kind, report.snapshot_segments, report.replayed_events) == ("warm", 3, 0)
    assert report.warnings == []
    assert_same_state(live_state(again.conversation), live_state(live.conversation))
    # The same next reply as the process that saved it, and the chain goes on from seq 4.
    assert again.turn("and now?", GREEDY, max_tokens=6).reply_ids == \
        live.turn("and now?", GREEDY, max_tokens=6).reply_ids
    assert again.snapshots.next_save_kind() == ("segment", None)
    again.save()
    assert again.snapshots.head.seq == 4
    assert (SessionFiles(tmp_path, "s").snapshot_chain / "000004.seg").is_file()


def test_a_damaged_segment_is_set_aside_and_the_stream_replays_past_the_prefix(
        tiny_model, tmp_path) -> None:
    live = chained_session(tiny_model, tmp_path)
    chain = SessionFiles(tmp_path, "s").snapshot_chain
    data = bytearray((chain / "000002.seg").read_bytes())
    data[300] ^= 0xFF
    (chain / "000002.seg").write_bytes(bytes(data))
    again, report = reopened(tiny_model, tmp_path)
    assert report.kind == "warm" and report.snapshot_segments == 1
    assert report.replayed_events == 4  # turns 2 and 3: their messages and replies
    [warning] = report.warnings
    assert warning.startswith("snapshot chain stopped at 000002.seg: checksum mismatch")
    assert sorted(p.name.split(".rejected-")[0] for p in chain.glob("*.rejected-*")) == \
        ["000002.seg", "000003.seg"]
    # The replayed turns are prefilled where they were decoded: K/V agree to rounding.
    replayed, lived = live_state(again.conversation), live_state(live.conversation)
    for name in ("slot_clock", "slot_pos", "ring_counters", "turn_starts"):
        np.testing.assert_array_equal(replayed[name], lived[name], err_msg=name)
    np.testing.assert_allclose(replayed["k_cache"], lived["k_cache"], atol=1e-3)
    again.save()  # the chain goes on after its valid prefix: segment 2 again, a new one
    assert again.snapshots.head.seq == 2 and (chain / "000002.seg").is_file()
    third, report = reopened(tiny_model, tmp_path)
    assert (report.snapshot_segments, report.warnings) == (2, [])


def test_a_complete_save_replaces_the_chain(tiny_model, tmp_path) -> None:
    s = chained_session(tiny_model, tmp_path)
    s.snapshots.compact_share = 0.01  # the chain is now far past its share: compact
    assert s.snapshots.next_save_kind()[0] == "full"
    s.turn("one more", GREEDY, max_tokens=4)
    result = s.save()
    assert result.kind == "full" and "of its base" in result.why_full
    assert not list(SessionFiles(tmp_path, "s").snapshot_chain.glob("*.seg"))
    _, report = reopened(tiny_model, tmp_path)
    assert (report.kind, report.snapshot_segments) == ("warm", 0)


def test_fork_rename_delete_and_verify_carry_the_chain(tiny_model, tmp_path) -> None:
    live = chained_session(tiny_model, tmp_path, "src")
    live.close()
    fork = fork_session(tmp_path, "src", "copy")
    assert fork.snapshot_bytes == SessionFiles(tmp_path, "src").snapshot.stat().st_size + sum(
        p.stat().st_size for p in SessionFiles(tmp_path, "src").snapshot_chain.iterdir())
    _, report = reopened(tiny_model, tmp_path, "copy")
    assert (report.kind, report.snapshot_segments, report.replayed_events) == ("warm", 3, 0)
    rename_session(tmp_path, "src", "renamed")
    assert not SessionFiles(tmp_path, "src").snapshot_chain.exists()
    _, report = reopened(tiny_model, tmp_path, "renamed")
    assert (report.kind, report.snapshot_segments) == ("warm", 3)
    entry = delete_session(tmp_path, "renamed")
    assert not SessionFiles(tmp_path, "renamed").snapshot_chain.exists()
    assert restore_deleted(tmp_path, entry.entry) == "renamed"
    verified = verify_session(tiny_model, tmp_path, "renamed", POLICY)
    assert verified.ok and verified.warm_kind == "warm", (verified.warm_reason,
                                                          verified.problems)


def test_inspect_lists_the_chain(tiny_model, tmp_path) -> None:
    chained_session(tiny_model, tmp_path)
    files = SessionFiles(tmp_path, "s")
    (files.snapshot_chain / "000003.seg").write_bytes(b"junk")
    report = inspect_snapshot(files.snapshot)
    chain = report["chain"]
    assert chain["restorable"] == 2
    assert [(s["file"], s["valid"]) for s in chain["segments"]] == \
        [("000001.seg", True), ("000002.seg", True), ("000003.seg", False)]
    assert [s["turn"] for s in chain["segments"][:2]] == [2, 3]
    text = render_inspection(report)
    assert "chain: 2 of 3 segments restorable" in text
    assert "000003.seg  INVALID: truncated at byte 4" in text
    channel = Path(sys.executable).parent / "channel"
    cli = subprocess.run([str(channel), "snapshot", "inspect", "--json", str(files.snapshot)],
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr  # the base is valid: the chain ends early
    assert json.loads(cli.stdout)["chain"]["restorable"] == 2


@pytest.mark.parametrize("turns", [1])
def test_bytes_written_by_a_segment_save_are_the_segment(tiny_model, tmp_path,
                                                         turns) -> None:
    s = chained_session(tiny_model, tmp_path, turns=turns)
    s.turn("short one", GREEDY, max_tokens=3)
    result = s.save()
    seg = SessionFiles(tmp_path, "s").snapshot_chain / f"{s.snapshots.head.seq:06d}.seg"
    assert result.bytes == seg.stat().st_size < s.snapshots.path.stat().st_size


def test_earlier_generations_stay_within_the_budget(tiny_model, tmp_path) -> None:
    s = Session(tiny_model, tmp_path, "s", POLICY)
    s.snapshots.incremental = False  # every save a complete one: a generation each
    s.snapshots.keep_links = 3
    s.boot()
    for i in range(6):
        s.turn(f"message {i}", GREEDY, max_tokens=2)
        assert s.save().kind == "full"
    kept = generations(s.snapshots.path)
    assert len(kept) == 2 and sum(g.links for g in kept) + 1 == 3  # with the live base
    assert kept[0].base.name > kept[1].base.name  # newest first: names sort by anchor
    s.snapshots.keep_bytes = kept[0].bytes * 3 // 2  # now bytes bind: only the newest fits
    s.turn("one more", GREEDY, max_tokens=2)
    s.save()
    assert len(generations(s.snapshots.path)) == 1


def test_bad_chain_settings_are_refused_in_one_line(tmp_path, tiny_gguf, tiny_cache) -> None:
    for flags, words in ((["--keep-turns", "0"], "--keep-turns must be at least 1"),
                         (["--compact-share", "-1"], "--compact-share above 0")):
        e = spawn(tmp_path, tiny_cache, tiny_gguf, flags)
        error = e.wait_for("error", timeout=60)
        assert error["fatal"] and words in error["message"] and "\n" not in error["message"]
        assert e.proc.wait(30) == 2


def test_a_base_gone_behind_the_sessions_back_makes_the_next_save_complete(
        tiny_model, tmp_path) -> None:
    s = chained_session(tiny_model, tmp_path)
    s.snapshots.path.unlink()  # say, another program moved it away
    assert s.snapshots.next_save_kind() == ("full", "the base snapshot is gone")
    s.turn("after that", GREEDY, max_tokens=3)
    assert s.save().kind == "full"
    again, report = reopened(tiny_model, tmp_path)
    assert (report.kind, report.snapshot_segments, report.warnings) == ("warm", 0, [])
    assert_same_state(live_state(again.conversation), live_state(s.conversation))
