"""Snapshot chains (issue 32 groundwork): a base snapshot plus one segment per turn restores
exactly the live state; a torn, foreign, out-of-order or post-rebase segment ends the chain
with a reason and the longest valid prefix is restored."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from engine.conversation import Conversation
from engine.session.session import Session
from engine.snapshot.chain import restore
from engine.snapshot.format import SnapshotError
from engine.snapshot.segment import (
    ChainHead,
    SegmentWriter,
    SegmentWriterStateError,
    chain_dir,
    compaction_reason,
    save_segment,
    segment_path,
    take_segment_cut,
)
from engine.snapshot.segment_format import SegmentSections
from engine.snapshot.snapshotter import Snapshotter
from engine.snapshot.writer import take_cut, write_cut
from engine.state.ring_policy import RingPolicy

from .test_snapshot import GREEDY, SMALL, assert_same_state, live_state

ANCHOR = "01JABCDEFGHJKMNPQRSTVWXYZ0"


def base_save(conv: Conversation, path: Path) -> ChainHead:
    """A complete save (the stale segments removed); save_segment then extends it as far
    as a test likes (no compaction share applies to it)."""
    saver = Snapshotter(conv, path)
    assert saver.save(ANCHOR).kind == "full"
    return saver.head


def session_chain(tiny_model, tmp_path: Path, turns: int = 3):
    """A session saved whole after its first turn, then one segment per turn (its own
    saves); the live state after each link."""
    s = Session(tiny_model, tmp_path, "s", RingPolicy().scaled_to(256))
    # A tiny ring's base is small next to a turn: let the chain grow past the usual 50%.
    s.snapshots.compact_share = 8.0
    s.boot()
    s.turn("hello there", GREEDY, max_tokens=5)
    assert s.save().kind == "full"
    states = [live_state(s.conversation)]
    for i in range(turns):
        s.turn(f"question number {i}", GREEDY, max_tokens=5)
        assert s.save().kind == "segment"
        states.append(live_state(s.conversation))
    return s, s.snapshots.path, s.snapshots.head, states


def test_base_plus_segments_is_the_live_state_and_the_chain_continues(tiny_model,
                                                                      tmp_path) -> None:
    s, base, head, states = session_chain(tiny_model, tmp_path)
    assert head.seq == 3 and sorted(p.name for p in chain_dir(base).iterdir()) == \
        ["000001.seg", "000002.seg", "000003.seg"]
    fresh = Conversation(tiny_model, s.conversation.policy)
    known = {e.id for e in s.stream.read().events}
    report = restore(fresh, base, known_ids=known)
    assert report.stopped is None and report.segments == 3 and report.ignored == []
    assert report.clock == s.conversation.ring.clock and report.stream_id == s.last_event_id
    assert_same_state(live_state(fresh), states[-1])
    # The restored conversation goes on as the live one does, and its head extends the chain.
    assert report.head.digest == head.digest and report.head.seq == 3
    assert report.head.generation == fresh.arena.generation
    for conv in (s.conversation, fresh):
        conv.ingest([7, 8, 9])
    after = save_segment(fresh, report.head, chain_dir(base), ANCHOR)
    again = Conversation(tiny_model, s.conversation.policy)
    assert restore(again, base).segments == after.seq == 4
    assert_same_state(live_state(again), live_state(s.conversation))


def test_segments_follow_evictions_exactly(tiny_model, tmp_path) -> None:
    conv = Conversation(tiny_model, SMALL)
    conv.ingest([1, 5, 9, 13], anchors=True)
    base = tmp_path / "e.snapshot.bin"
    head = base_save(conv, base)
    rng = np.random.default_rng(1)
    for _ in range(6):
        conv.ring.mark_turn_start()
        conv.ingest([int(t) for t in rng.integers(3, 250, size=20)])
        head = save_segment(conv, head, chain_dir(base), ANCHOR)
    assert conv.ring.evicted > 0 and conv.ring.rebases == 0  # rows slid down, none rotated
    fresh = Conversation(tiny_model, SMALL)
    report = restore(fresh, base)
    assert report.segments == 6 and report.stopped is None
    assert_same_state(live_state(fresh), live_state(conv))


def test_a_rollback_that_reuses_saved_clocks_is_carried(tiny_model, tmp_path) -> None:
    conv = Conversation(tiny_model, SMALL)
    conv.ingest([1, 5, 9, 13], anchors=True)
    conv.ingest([20, 21, 22])
    base = tmp_path / "r.snapshot.bin"
    head = base_save(conv, base)
    mark = conv.ring.mark()
    conv.ingest([30, 31, 32, 33, 34])
    head = save_segment(conv, head, chain_dir(base), ANCHOR)
    conv.ring.rollback(mark)  # the clock goes back; new tokens take the saved clocks again
    conv.ingest([40, 41, 42, 43, 44, 45])
    assert conv.ring.rewound_to == int(mark.counters[2])
    cut = take_segment_cut(conv, head, ANCHOR)
    assert cut.header.dirty_from == conv.ring.rewound_to and cut.header.n_dirty == 6
    head = save_segment(conv, head, chain_dir(base), ANCHOR)
    assert conv.ring.rewound_to is None  # durable now
    fresh = Conversation(tiny_model, SMALL)
    assert restore(fresh, base).segments == 2
    assert_same_state(live_state(fresh), live_state(conv))


def test_the_clock_alone_would_miss_rows_rewritten_after_a_rollback(tiny_model,
                                                                   tmp_path) -> None:
    """Why the ring keeps rewound_to: without it, a segment carries only the clocks past
    the last save, and the rows rewritten under reused clocks restore as the old ones."""
    conv = Conversation(tiny_model, SMALL)
    conv.ingest([1, 5, 9, 13], anchors=True)
    base = tmp_path / "w.snapshot.bin"
    head = base_save(conv, base)
    mark = conv.ring.mark()
    conv.ingest([30, 31, 32, 33, 34])
    head = save_segment(conv, head, chain_dir(base), ANCHOR)
    conv.ring.rollback(mark)
    conv.ingest([40, 41, 42, 43, 44, 45])
    conv.ring.rewound_to = None  # as if nothing tracked the rollback
    save_segment(conv, head, chain_dir(base), ANCHOR)
    fresh = Conversation(tiny_model, SMALL)
    restore(fresh, base)
    assert not np.array_equal(live_state(fresh)["k_cache"], live_state(conv)["k_cache"])


@pytest.mark.parametrize("damage, reason", [
    ("truncate", "000003.seg: truncated at byte"),
    ("flip", "000003.seg: checksum mismatch"),
    ("empty", "000003.seg: truncated at byte 0"),
])
def test_a_torn_last_segment_restores_the_longest_valid_prefix(tiny_model, tmp_path, damage,
                                                               reason) -> None:
    s, base, _, states = session_chain(tiny_model, tmp_path)
    last = segment_path(chain_dir(base), 3)
    data = last.read_bytes()
    last.write_bytes({"truncate": data[: len(data) // 2], "empty": b"",
                      "flip": data[:100] + bytes([data[100] ^ 1]) + data[101:]}[damage])
    fresh = Conversation(tiny_model, s.conversation.policy)
    report = restore(fresh, base)
    assert report.segments == 2 and report.stopped.startswith(reason)
    assert report.ignored == ["000003.seg"]
    assert_same_state(live_state(fresh), states[2])


def test_a_foreign_segment_is_refused(tiny_model, tmp_path) -> None:
    a, base_a, _, states = session_chain(tiny_model, tmp_path / "a", turns=1)
    b, base_b, _, _ = session_chain(tiny_model, tmp_path / "b", turns=2)
    shutil.copy(segment_path(chain_dir(base_b), 2), segment_path(chain_dir(base_a), 2))
    fresh = Conversation(tiny_model, a.conversation.policy)
    report = restore(fresh, base_a)
    assert report.segments == 1 and "000002.seg: extends another base" in report.stopped
    assert_same_state(live_state(fresh), states[1])


def test_out_of_order_segments_are_refused(tiny_model, tmp_path) -> None:
    s, base, _, states = session_chain(tiny_model, tmp_path)
    d = chain_dir(base)
    segment_path(d, 2).rename(d / "tmp")
    segment_path(d, 3).rename(segment_path(d, 2))
    (d / "tmp").rename(segment_path(d, 3))
    fresh = Conversation(tiny_model, s.conversation.policy)
    report = restore(fresh, base)
    assert report.segments == 1 and report.stopped == \
        "000002.seg: file name says 000002.seg, header says seq 3"
    segment_path(d, 2).rename(d / "tmp")  # names put right, then a gap: 3 after 1
    segment_path(d, 3).unlink()
    (d / "tmp").rename(segment_path(d, 3))
    report = restore(Conversation(tiny_model, s.conversation.policy), base)
    assert report.segments == 1 and "does not follow seq 1" in report.stopped
    assert_same_state(live_state(fresh), states[1])


def rebasing_conversation(tiny_model, tmp_path):
    conv = Conversation(tiny_model, SMALL)
    conv.ingest([1, 5, 9, 13], anchors=True)
    base = tmp_path / "b.snapshot.bin"
    head = base_save(conv, base)
    rng = np.random.default_rng(2)
    while conv.ring.rebases == 0:  # the tiny model's context is 256 positions
        conv.ingest([int(t) for t in rng.integers(3, 250, size=20)])
    return conv, base, head


def test_a_rebase_forces_a_full_save(tiny_model, tmp_path) -> None:
    conv, base, head = rebasing_conversation(tiny_model, tmp_path)
    assert compaction_reason(head, conv) == "the ring rebased its positions since the base"
    with pytest.raises(SnapshotError, match="needs a full save: the ring rebased"):
        take_segment_cut(conv, head, ANCHOR)
    # A segment forced through anyway is refused on restore, and the base alone comes back.
    save_segment(conv, head.__class__(**{**head.__dict__, "rebases": conv.ring.rebases}),
                 chain_dir(base), ANCHOR)
    report = restore(Conversation(tiny_model, SMALL), base)
    assert report.segments == 0 and "cut after a rebase" in report.stopped
    # The full save a rebase calls for makes the old segments foreign: a crash between the
    # new base's rename and their removal still restores the new base, and nothing else.
    write_cut(take_cut(conv, ANCHOR), base)  # the base written, the segments not yet removed
    fresh = Conversation(tiny_model, SMALL)
    report = restore(fresh, base)
    assert report.segments == 0 and "extends another base" in report.stopped
    assert_same_state(live_state(fresh), live_state(conv))
    # The Snapshotter's complete save removes them.
    saver = Snapshotter(conv, base)
    assert saver.next_save_kind() == ("full", "no base snapshot")
    assert saver.save(ANCHOR).kind == "full"
    assert not list(chain_dir(base).glob("*.seg"))
    report = restore(Conversation(tiny_model, SMALL), base)
    assert report.segments == 0 and report.stopped is None


def test_a_reset_arena_forces_a_full_save(tiny_model, tmp_path) -> None:
    conv = Conversation(tiny_model, SMALL)
    conv.ingest([1, 5, 9, 13], anchors=True)
    head = base_save(conv, tmp_path / "x.snapshot.bin")
    assert compaction_reason(head, conv) is None
    conv.reset()
    assert compaction_reason(head, conv) == "the arena was reset or restored since the base"


def test_a_chain_past_half_its_base_asks_for_a_full_save(tiny_model, tmp_path) -> None:
    conv = Conversation(tiny_model, SMALL)
    conv.ingest([1, 5, 9, 13] + list(range(20, 60)), anchors=True)
    head = base_save(conv, tmp_path / "h.snapshot.bin")
    while compaction_reason(head, conv) is None:
        conv.ingest([7, 8, 9])
        head = save_segment(conv, head, chain_dir(tmp_path / "h.snapshot.bin"), ANCHOR)
    assert head.chain_bytes > head.base_bytes // 2 and head.seq >= 2
    assert compaction_reason(head, conv).startswith("the chain is ")


def test_writer_refuses_out_of_order_calls(tiny_model, tmp_path) -> None:
    conv = Conversation(tiny_model, SMALL)
    conv.ingest([1, 5, 9, 13], anchors=True)
    head = base_save(conv, tmp_path / "o.snapshot.bin")
    conv.ingest([7, 8])
    cut = take_segment_cut(conv, head, ANCHOR)
    writer = SegmentWriter(tmp_path / "000001.seg")
    with pytest.raises(SegmentWriterStateError, match="write_rows called in state 'open'"):
        writer.write_rows(cut)
    writer.write_header(cut)
    with pytest.raises(SegmentWriterStateError):
        writer.commit()
    writer.abort()
    assert not writer.tmp.exists() and not (tmp_path / "000001.seg").exists()


def test_bytes_per_segment_after_a_short_turn_on_a_full_ring(tiny_model, tmp_path) -> None:
    policy = RingPolicy(max_slots=200, recent_window=16, evict_batch=16, prefill_chunk=32)
    conv = Conversation(tiny_model, policy)
    conv.ingest([1, 5, 9, 13], anchors=True)
    rng = np.random.default_rng(3)
    while conv.ring.n_active < 190:
        conv.ingest([int(t) for t in rng.integers(3, 250, size=10)])
    base = tmp_path / "f.snapshot.bin"
    head = base_save(conv, base)
    conv.ring.mark_turn_start()
    conv.ingest([int(t) for t in rng.integers(3, 250, size=12)])  # a short turn: 12 tokens
    head = save_segment(conv, head, chain_dir(base), ANCHOR)
    seg, full = segment_path(chain_dir(base), 1).stat().st_size, base.stat().st_size
    cfg = tiny_model.config
    # The same turn (40 new slots) on the shipped model's geometry (30 layers x 192, f16
    # keys on ggml) with a full 4096-slot ring: sizes follow from the format alone.
    shipped = SegmentSections.plan(4096, 40, 30, 192, np.float16, np.float32, (), 0).size
    shipped_full = 4096 * 30 * 192 * (2 + 4) + 4096 * 17 + 3000
    print(f"\nsegment after a {12}-token turn on a ring of {conv.ring.n_active} slots "
          f"({cfg.n_full} layers x {cfg.kv_dim}): {seg} bytes vs full snapshot {full} "
          f"bytes ({100 * seg / full:.1f}%); shipped-model geometry, 40 new of 4096 slots: "
          f"{shipped} vs ~{shipped_full} bytes ({100 * shipped / shipped_full:.2f}%)")
    assert conv.ring.n_active >= 190 and seg < full


@pytest.mark.parametrize("fixture", ["gemma3", "lfm2", "qwen35"])
def test_hybrid_layer_planes_follow_the_chain(fixture, tmp_path) -> None:
    """Window planes carry only their newest rows (all of them after a rollback behind the
    last link); conv carries and delta-rule states go whole."""
    from engine.model.model import load_model

    model = load_model(Path(__file__).parent / "fixtures" / "arch" / f"{fixture}.gguf",
                       tmp_path / "cache")
    policy = RingPolicy(max_slots=96, recent_window=8, evict_batch=8, prefill_chunk=16)
    conv = Conversation(model, policy)
    conv.ingest([1, 5, 9, 13], anchors=True)
    base = tmp_path / "p.snapshot.bin"
    head = base_save(conv, base)
    assert head.planes  # the fixture keeps layers outside the ring
    rng = np.random.default_rng(4)
    mark = None
    for step in range(4):
        if step == 2:
            mark = conv.ring.mark()
        conv.ingest([int(t) for t in rng.integers(3, 200, size=7)])
        head = save_segment(conv, head, chain_dir(base), ANCHOR)
    conv.ring.rollback(mark)  # behind the last link: the window plane goes whole
    conv.ingest([11, 12])
    head = save_segment(conv, head, chain_dir(base), ANCHOR)
    fresh = Conversation(model, policy)
    report = restore(fresh, base)
    assert report.segments == 5 and report.stopped is None
    assert_same_state(live_state(fresh), live_state(conv))
