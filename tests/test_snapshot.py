"""Snapshots: exact round trips, warm boots that continue exactly, and a consistent cut."""

from __future__ import annotations

import errno
import os
import resource
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from engine.conversation import Conversation
from engine.fileio import describe_os_error
from engine.session.session import Session
from engine.snapshot.chain import restore
from engine.snapshot.format import HEADER, SnapshotError
from engine.snapshot.restore import read_snapshot
from engine.snapshot.snapshotter import SnapshotStatus, Snapshotter
from engine.snapshot.writer import (
    SnapshotWriter,
    SnapshotWriterStateError,
    take_cut,
)
from engine.state.arena import STATE_REGIONS
from engine.state.ring_policy import RingPolicy
from engine.state.sampler import SamplingSettings

GREEDY = SamplingSettings()
SMALL = RingPolicy(max_slots=64, recent_window=8, evict_batch=8, prefill_chunk=16)


def live_state(conv: Conversation) -> dict[str, np.ndarray]:
    """Every persistent region (and layer plane), restricted to the live slots."""
    v, n = conv.arena.views(), conv.ring.n_active
    state = {name: getattr(v, name).copy() for name in STATE_REGIONS + conv.ring.planes}
    state["k_cache"], state["v_cache"] = state["k_cache"][:, :n], state["v_cache"][:, :n]
    for name in ("slot_clock", "slot_pos", "slot_active", "slot_salience"):
        state[name] = state[name][:n]
    return state


def assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def busy_conversation(model, policy=SMALL, tokens=300, seed=0) -> Conversation:
    conv = Conversation(model, policy)
    conv.ingest([1, 5, 9, 13], anchors=True)
    rng = np.random.default_rng(seed)
    for _ in range(tokens // 20):
        conv.ring.mark_turn_start()
        conv.ingest([int(t) for t in rng.integers(3, 250, size=20)])
    return conv


def test_round_trip_is_bit_identical_even_when_fragmented(tiny_model, tmp_path: Path) -> None:
    conv = busy_conversation(tiny_model)
    assert conv.ring.evicted > 0 and conv.ring.rebases > 0  # fragmented and rebased
    saver = Snapshotter(conv, tmp_path / "a.snapshot.bin")
    result = saver.save("01JABCDEFGHJKMNPQRSTVWXYZ0")
    assert result.status == SnapshotStatus.SAVED and result.bytes == result.path.stat().st_size
    fresh = Conversation(tiny_model, SMALL)
    report = restore(fresh, result.path)
    assert report.n_active == conv.ring.n_active
    assert_same_state(live_state(fresh), live_state(conv))
    assert fresh.ring.n_anchors == 4
    assert list(fresh.arena.views().slot_pos[:4]) == [0, 1, 2, 3]


def test_file_size_is_header_metadata_and_active_slots_only(tiny_model, tmp_path) -> None:
    conv = busy_conversation(tiny_model, tokens=40)
    n, cfg = conv.ring.n_active, tiny_model.config
    path = Snapshotter(conv, tmp_path / "s.snapshot.bin").save("").path
    snap = read_snapshot(path)
    kv_bytes = 2 * cfg.n_layers * n * cfg.kv_dim * 4
    assert snap.sections.kv + kv_bytes + 24 == path.stat().st_size
    assert snap.sections.kv < 4096  # header, identity and metadata are small
    assert path.read_bytes()[:4] == b"SNAP" and HEADER.size == 624


def test_zero_delta_gate_writes_nothing(tiny_model, tmp_path: Path) -> None:
    conv = busy_conversation(tiny_model, tokens=40)
    saver = Snapshotter(conv, tmp_path / "s.snapshot.bin")
    assert saver.save("").status == SnapshotStatus.SAVED
    stamp = saver.path.stat().st_mtime_ns
    time.sleep(0.01)
    assert saver.save("").status == SnapshotStatus.EXISTS
    assert saver.path.stat().st_mtime_ns == stamp
    conv.forward.decode_one_token(7)
    assert saver.save("").status == SnapshotStatus.SAVED


def test_cut_is_consistent_while_decoding_continues(tiny_model, tmp_path: Path) -> None:
    policy = RingPolicy(max_slots=256, recent_window=16, evict_batch=16, prefill_chunk=32)
    conv = busy_conversation(tiny_model, policy, tokens=160)
    at_cut = live_state(conv)
    release = threading.Event()
    decoded_while_writing = []

    def slow_progress(done: int, total: int) -> None:
        release.wait(5)  # hold the writer until the main thread has decoded

    saver = Snapshotter(conv, tmp_path / "s.snapshot.bin", progress=slow_progress)
    saver.save("", wait=False)
    for token in range(10, 30):
        conv.forward.decode_one_token(token)
        decoded_while_writing.append(saver.busy)
    release.set()
    assert saver.wait().status == SnapshotStatus.SAVED
    assert all(decoded_while_writing)
    assert conv.ring.clock == at_cut["ring_counters"][2] + 20
    fresh = Conversation(tiny_model, policy)
    restore(fresh, saver.path)
    assert_same_state(live_state(fresh), at_cut)


def test_eviction_waits_for_the_writer_instead_of_moving_captured_rows(tiny_model, tmp_path):
    conv = busy_conversation(tiny_model, tokens=200)
    while conv.ring.n_active < SMALL.max_slots:
        conv.forward.decode_one_token(3)
    at_cut = live_state(conv)
    release = threading.Event()
    saver = Snapshotter(conv, tmp_path / "s.snapshot.bin", progress=lambda d, t: release.wait(5))
    saver.save("", wait=False)
    worker = threading.Thread(target=conv.forward.decode_one_token, args=(4,))
    worker.start()  # needs an eviction: must block until the snapshot is written
    time.sleep(0.2)
    assert worker.is_alive()
    release.set()
    worker.join(5)
    assert not worker.is_alive() and conv.ring.evicted > 0
    fresh = Conversation(tiny_model, SMALL)
    restore(fresh, saver.path)
    assert_same_state(live_state(fresh), at_cut)


def test_writer_refuses_out_of_order_calls(tiny_model, tmp_path: Path) -> None:
    conv = busy_conversation(tiny_model, tokens=20)
    cut = take_cut(conv, "")
    writer = SnapshotWriter(tmp_path / "s.snapshot.bin")
    with pytest.raises(SnapshotWriterStateError, match="write_slabs called in state 'open'"):
        writer.write_slabs(cut)
    writer.write_header(cut)
    with pytest.raises(SnapshotWriterStateError):
        writer.commit()
    writer.abort()
    assert not writer.tmp.exists() and not (tmp_path / "s.snapshot.bin").exists()


@pytest.mark.parametrize("kind", ["full", "segment"])
def test_a_refused_write_fails_cleanly_and_keeps_the_old_snapshot(tiny_model, tmp_path: Path,
                                                                  kind: str) -> None:
    conv = busy_conversation(tiny_model, tokens=40)
    saver = Snapshotter(conv, tmp_path / "s.snapshot.bin", incremental=kind == "segment")
    saver.save("")
    before = saver.path.read_bytes()
    conv.forward.decode_one_token(5)
    assert saver.next_save_kind()[0] == kind
    # A file-size limit below the file's size stands in for a full disk: the kernel refuses
    # the write part-way (EFBIG, as ENOSPC would), with SIGXFSZ ignored. A segment of one
    # token is a few KB, past its 192-byte header.
    old_signal = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    limit = len(before) // 2 if kind == "full" else 256
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old_limit[1]))
    try:
        result = saver.save("")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_signal)
    assert (result.status, result.kind) == (SnapshotStatus.FAILED, kind)
    assert result.error == os.strerror(errno.EFBIG)
    assert saver.path.read_bytes() == before
    assert not saver.path.with_name("s.snapshot.bin.tmp").exists()
    assert not list(saver.chain_dir.glob("*")), "a refused segment leaves nothing behind"
    assert describe_os_error(OSError(errno.ENOSPC, "x")) == "no space left on device"
    conv.forward.decode_one_token(6)  # the ring was thawed: decoding and evicting go on
    again = saver.save("")
    assert (again.status, again.kind) == (SnapshotStatus.SAVED, kind)
    fresh = Conversation(tiny_model, conv.policy)
    restore(fresh, saver.path)
    assert_same_state(live_state(fresh), live_state(conv))


def test_session_warm_boot_replays_only_newer_events(tiny_model, tmp_path: Path) -> None:
    policy = RingPolicy().scaled_to(256)
    first = Session(tiny_model, tmp_path, "s", policy)
    first.boot()
    first.turn("one", GREEDY, max_tokens=4)
    first.save()
    clock_at_save = first.conversation.ring.clock
    first.turn("two", GREEDY, max_tokens=4)  # not saved: must be replayed
    uninterrupted = live_state(first.conversation)

    second = Session(tiny_model, tmp_path, "s", policy)
    report = second.boot()
    assert report.kind == "warm" and report.replayed_events == 2
    assert report.replayed_tokens == first.conversation.ring.clock - clock_at_save
    assert second.conversation.ring.clock == first.conversation.ring.clock
    replayed = live_state(second.conversation)
    np.testing.assert_array_equal(replayed["slot_pos"], uninterrupted["slot_pos"])
    np.testing.assert_allclose(replayed["k_cache"], uninterrupted["k_cache"], atol=1e-4)


def test_warm_continuation_equals_uninterrupted(tiny_model, tmp_path: Path) -> None:
    policy = RingPolicy().scaled_to(256)
    a = Session(tiny_model, tmp_path / "a", "s", policy)
    a.boot()
    a.turn("first message", GREEDY, max_tokens=6)
    a.save()
    b = Session(tiny_model, tmp_path / "a", "s", policy)
    assert b.boot().kind == "warm"
    assert_same_state(live_state(b.conversation), live_state(a.conversation))
    ra = a.turn("second message", GREEDY, max_tokens=6)
    rb = b.turn("second message", GREEDY, max_tokens=6)
    assert ra.reply_ids == rb.reply_ids
    np.testing.assert_array_equal(a.conversation.arena.views().logits,
                                  b.conversation.arena.views().logits)


def test_refused_snapshot_boots_cold_and_is_kept_aside(tiny_model, tmp_path: Path) -> None:
    s = Session(tiny_model, tmp_path, "s", RingPolicy().scaled_to(256))
    s.boot()
    s.turn("hello", GREEDY, max_tokens=3)
    s.save()
    data = bytearray(s.snapshots.path.read_bytes())
    data[-100] ^= 0xFF
    s.snapshots.path.write_bytes(bytes(data))
    again = Session(tiny_model, tmp_path, "s", RingPolicy().scaled_to(256))
    report = again.boot()
    assert report.kind == "cold" and "checksum mismatch" in report.reason
    kept = list(tmp_path.glob("s.snapshot.bin.rejected-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == bytes(data)
    assert again.conversation.ring.clock == s.conversation.ring.clock  # nothing lost
    assert again.turn("still here?", GREEDY, max_tokens=3).stop in ("eot", "max_tokens")


def test_snapshot_from_another_geometry_is_refused(tiny_model, tmp_path: Path) -> None:
    conv = busy_conversation(tiny_model, tokens=40)
    path = Snapshotter(conv, tmp_path / "s.snapshot.bin").save("").path
    other = Conversation(tiny_model, RingPolicy().scaled_to(128))
    before = live_state(other)
    with pytest.raises(SnapshotError, match="different ring size"):
        restore(other, path)
    assert_same_state(live_state(other), before)


def test_snapshot_from_another_model_is_refused(tiny_model, real_model, tmp_path: Path) -> None:
    conv = busy_conversation(tiny_model, tokens=40)
    path = Snapshotter(conv, tmp_path / "s.snapshot.bin").save("").path
    with pytest.raises(SnapshotError, match="different model"):
        restore(Conversation(real_model, RingPolicy().scaled_to(64)), path)
