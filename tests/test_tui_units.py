"""Unit tests of the app's plain helpers, and its promise to start without numpy."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from channel_tui import format as fmt
from channel_tui.app import describe_exit
from channel_tui.engine import merge_tokens
from channel_tui.export import ChatMessage, export_transcript
from channel_tui.options import AppOptions, data_dir_problem, valid_session_name
from channel_tui.sessions import last_message, list_sessions
from channel_tui.widgets.ring_view import bucket, cell_colour, downsample

REPO = Path(__file__).resolve().parent.parent


# The protocol module and what it imports: standard library only, shared by both sides.
PROTOCOL_MODULES = {"engine", "engine.errors", "engine.paths", "engine.process",
                    "engine.process.flags", "engine.process.protocol", "engine.state",
                    "engine.state.sampling", "engine.text",
                    # Moving session files (rename, trash, search): files and locks only.
                    "engine.session", "engine.session.manage", "engine.session.owner",
                    "engine.session.search",
                    "engine.session.stream", "engine.fileio"}


def test_the_app_imports_neither_numpy_nor_engine_internals() -> None:
    code = ("import sys, channel_tui.app, channel_tui.screens.boot_compare, "
            "channel_tui.screens.sessions, channel_tui.screens.help; "
            "print(' '.join(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('numpy', 'engine'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True)
    assert set(out.stdout.split()) <= PROTOCOL_MODULES


def test_the_chat_screen_handles_every_event_type_it_lists() -> None:
    """The handler table names only events the engine emits (events.py)."""
    from channel_tui.link import EngineLink
    from channel_tui.screens.chat import ChatScreen
    from engine.process.events import EVENT_TYPES

    table = ChatScreen("s", EngineLink(AppOptions())).event_handlers()
    assert set(table) <= EVENT_TYPES and {"booted", "token", "undone", "forked",
                                             "rewound"} <= set(table)


def test_boot_lines() -> None:
    warm = {"kind": "warm", "restored_slots": 3812, "restore_ms": 21.2, "replayed_events": 1,
            "replay_ms": 90.4}
    assert fmt.boot_line(warm) == ("Warm boot · resumed your 3,812-token conversation in "
                                   "21 ms · then read 1 newer line in 90 ms")
    # With the speed its messages were read at, what a cold boot would have cost.
    warm["transcript"] = [{"role": "user"}, {"role": "assistant", "prefill_tok_s": 200.0},
                          {"role": "assistant", "prefill_tok_s": 250.0}]
    assert "(re-reading it would take about 15.2 s)" in fmt.boot_line(warm)
    cold = {"kind": "cold", "reason": "no snapshot", "replayed_events": 48,
            "replayed_tokens": 5120, "replay_ms": 23_400}
    assert fmt.boot_line(cold) == ("Cold boot · re-read your conversation (48 lines, "
                                   "5,120 tokens) in 23.4 s: nothing was saved yet")
    fresh = {**cold, "replayed_events": 1, "replay_ms": 40.0,
             "transcript": [{"role": "system", "content": "Be brief."}]}
    assert fmt.boot_line(fresh) == "Cold boot · a new conversation, ready in 40 ms"
    assert fmt.phase_line({"phases_ms": {"read_stream": 1.25, "copy": 14.0},
                           "snapshot_bytes": 88_000_000}) == \
        "read stream 1.2 ms · copy 14 ms · snapshot 88 MB"
    assert fmt.replay_line(1000, 5000, 250.0) == "1,000 / 5,000 tokens · 250 tok/s · 16.0 s left"


def test_snapshot_states() -> None:
    assert fmt.snapshot_text({"status": "saved", "bytes": 88e6}, 100.0, 112.0) == \
        "saved 12 s ago"
    assert fmt.snapshot_text({"status": "saving"}, None) == "saving…"
    assert fmt.snapshot_text({"status": "pending", "due_in_ms": 5000}, None) == \
        "saving in a moment"
    assert fmt.snapshot_text({"status": "exists"}, None) == "saved, nothing new"
    assert fmt.snapshot_text({"status": "failed", "error": "disk full"}, None) == \
        "save failed: disk full"
    assert fmt.snapshot_text(None, None) == "not saved yet"


def test_sessions_listing_survives_torn_lines(tmp_path) -> None:
    good = {"id": "01JDZ000000000000000000001", "role": "user", "content": "hi\nthere",
            "ts": "2026-11-29T10:00:00.000Z"}
    (tmp_path / "a.stream.jsonl").write_text(json.dumps(good) + "\n" + '{"id": "torn')
    (tmp_path / "b.snapshot.bin").write_bytes(b"x" * 10)
    (tmp_path / "engine.log").write_text("not a session")
    sessions = {s.name: s for s in list_sessions(tmp_path)}
    assert set(sessions) == {"a", "b"}
    assert sessions["a"].last_message == "you: hi" and sessions["a"].last_saved is None
    assert sessions["b"].size_bytes == 10 and sessions["b"].last_saved is not None
    assert last_message(tmp_path / "missing.stream.jsonl") == ""
    assert list_sessions(tmp_path / "nowhere") == []


def test_token_events_arriving_together_are_merged() -> None:
    events = [{"type": "token", "req": 1, "session": "s", "text": "a"},
              {"type": "token", "req": 1, "session": "s", "text": "b"},
              None,
              {"type": "token", "req": 2, "session": "s", "text": "c"},
              {"type": "end_of_turn", "req": 2},
              {"type": "token", "req": 2, "session": "s", "text": "d"}]
    merged = list(merge_tokens(events))
    assert [e.get("text") for e in merged] == ["ab", "c", None, "d"]
    assert events[0]["text"] == "a"  # the originals are not modified


def test_ring_cells_bucket_and_colour() -> None:
    assert bucket("..") == "." and bucket(".3") == "3" and bucket("3a") == "a"
    assert bucket("Ab9") == "A" and bucket("ac") == "c"
    assert downsample("AB12ab..", 2) == "B2b."
    assert cell_colour(".") != cell_colour("0") != cell_colour("a") != cell_colour("A")


def test_export_writes_markdown_without_overwriting(tmp_path) -> None:
    messages = [ChatMessage("system", "Be brief."), ChatMessage("user", "Hi?"),
                ChatMessage("assistant", "Hello **there**", stop="cancelled")]
    first = export_transcript(tmp_path, "s", messages, "tiny")
    second = export_transcript(tmp_path, "s", messages, "tiny")
    assert first != second and first.exists() and second.exists()
    text = first.read_text()
    assert "> Be brief." in text and "## You" in text and "Hello **there**" in text
    assert "_(reply cancelled)_" in text
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in (first, second))


def test_export_never_writes_through_a_link(tmp_path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    for name in (f"s-{stamp}.md", f"s-{stamp}-2.md"):  # whichever second it writes in
        (tmp_path / name).symlink_to(victim)
    path = export_transcript(tmp_path, "s", [ChatMessage("user", "hi")])
    assert not path.is_symlink() and victim.read_text() == "precious"


def test_options_and_data_dir_checks(tmp_path) -> None:
    options = AppOptions(data_dir=tmp_path, model=Path("m.gguf"), backend="numpy",
                         engine_command=["eng"])
    assert options.engine_argv() == ["eng", "--data-dir", str(tmp_path), "--model", "m.gguf",
                                     "--backend", "numpy"]
    assert data_dir_problem(tmp_path / "new" / "dir") is None
    (tmp_path / "file").write_text("")
    assert "is not a directory" in data_dir_problem(tmp_path / "file")
    assert valid_session_name("chat-1.x") and not valid_session_name("../x")


def test_status_bar_names_the_eviction_policy_only_when_it_is_not_the_default() -> None:
    from channel_tui.widgets.status_bar import StatusBar

    bar = StatusBar()
    ring = {"active": 10, "capacity": 4096, "anchors": 3, "clock": 10}

    def shown(**extra) -> str:
        bar.set_reactive(StatusBar.ring, {**ring, **extra})
        return " ".join(t.plain for t in bar.segments())

    assert "forgets by" not in shown(policy="turns", policy_is_default=True)
    assert "forgets by h2o" in shown(policy="h2o", policy_is_default=False)
    assert "forgets by" not in shown()  # an engine that says nothing of its policy


def test_a_hybrid_model_says_what_each_kind_of_layer_keeps() -> None:
    event = {"ring_slots": 4096, "kv_bytes": 25_000_000, "layer_state": {
        "ring_layers": 3, "window_layers": 15, "window": 512, "conv_layers": 2,
        "plane_bytes": 16_000_000}}
    assert fmt.phase_line(event) == ("ring 4,096 slots on 3 global layers, 512-token windows "
                                     "on 15, 2 conv carries (25 MB K/V, 16 MB in the other "
                                     "layers)")
    qwen35 = {"ring_slots": 4096, "kv_bytes": 8_000_000, "layer_state": {
        "ring_layers": 6, "window_layers": 0, "window": 0, "conv_layers": 0,
        "delta_layers": 18, "plane_bytes": 19_000_000}}
    assert fmt.phase_line(qwen35) == ("ring 4,096 slots on 6 global layers, 18 delta-rule "
                                      "states (8.0 MB K/V, 19 MB in the other layers)")
    assert "global" not in fmt.phase_line({"ring_slots": 4096})


def test_engine_exits_are_described_in_words() -> None:
    # The engine checks its mapped files before each turn (a clear error); one cut short
    # in the middle of a forward pass can only kill it with SIGBUS, which the app explains.
    assert "shrank on disk" in describe_exit(-signal.SIGBUS)
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"
    assert describe_exit(-99) == "killed by signal 99"
    assert describe_exit(3) == "exit status 3" and describe_exit(None) == "no exit status"
