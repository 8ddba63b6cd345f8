"""Snapshot chain benchmarks (docs/snapshot.md, "Chains"): what a save after a short turn on
a full ring writes, complete against incremental, measured as the bytes this process sent to
storage (/proc/self/io), not only the files' sizes; a warm boot from a base plus 50
segments; and rewinds 10 and 50 turns back."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from ..model.model import Model
from ..session.rewind import rewind, turn_ends
from ..session.session import Session
from ..state.ring_policy import RingPolicy
from ..state.sampler import SamplingSettings
from .bench_snapshot import conversation_text, write_stream

QUESTION = "What did the keeper write down about the birds on the rail today?"
CHAIN_SEGMENTS = 50


def storage_write_bytes() -> int | None:
    """Bytes this process has caused to be written to storage (Linux's /proc/self/io
    write_bytes: page-cache writes count when dirtied, fsync or not); None elsewhere."""
    try:
        with open("/proc/self/io") as f:
            fields = dict(line.split(": ") for line in f.read().splitlines())
        return int(fields["write_bytes"])
    except (OSError, KeyError, ValueError):
        return None


def _short_turn_save(session: Session, incremental: bool) -> tuple[int, int | None, float]:
    """One short turn, then a save: (file bytes, storage bytes, save ms)."""
    session.snapshots.incremental = incremental
    session.turn(QUESTION, SamplingSettings(), max_tokens=8)
    before = storage_write_bytes()
    result = session.save()
    after = storage_write_bytes()
    assert result.status.name == "SAVED", result
    assert result.kind == ("segment" if incremental else "full"), result
    written = after - before if before is not None and after is not None else None
    return result.bytes, written, result.ms


def run_chain_benchmarks(model: Model, scratch: Path, repeat: int, backend=None) -> dict:
    """A session whose ring is full, saved whole; then short turns saved each way, and a
    chain of CHAIN_SEGMENTS short turns booted warm."""
    out: dict = {}
    policy = RingPolicy()
    with tempfile.TemporaryDirectory(dir=scratch, prefix="chainbench-") as tmp:
        data = Path(tmp)
        live = Session(model, data, "chain", policy, backend)
        # A conversation that fills the ring, read in by a cold boot's prefill: the short
        # turns below take it past full, so they evict as a long session's turns do.
        write_stream(live, conversation_text(model, policy.max_slots - 64))
        live.boot()
        live.snapshots.compact_share = float("inf")  # keep every segment for the chain boot
        live.save()
        full = [_short_turn_save(live, False) for _ in range(repeat)]
        segments = [_short_turn_save(live, True) for _ in range(repeat)]
        out["chain_full_ring_slots"] = live.conversation.ring.n_active
        out["chain_full_save_bytes"] = int(statistics.median(f[0] for f in full))
        out["chain_segment_save_bytes"] = int(statistics.median(s[0] for s in segments))
        if full[0][1] is not None:
            out["chain_full_save_storage_bytes"] = int(statistics.median(f[1] for f in full))
            out["chain_segment_save_storage_bytes"] = int(
                statistics.median(s[1] for s in segments))
            out["chain_segment_share_of_full"] = round(
                out["chain_segment_save_storage_bytes"] / out["chain_full_save_storage_bytes"],
                4)
        out["chain_full_save_ms"] = round(statistics.median(f[2] for f in full), 2)
        out["chain_segment_save_ms"] = round(statistics.median(s[2] for s in segments), 2)

        # Warm boot from a base and CHAIN_SEGMENTS segments, one per short turn.
        while live.snapshots.head.seq < CHAIN_SEGMENTS:
            _short_turn_save(live, True)
        boots, restores = [], []
        for _ in range(max(repeat, 3)):
            warm = Session(model, data, "chain", policy, backend)
            t0 = time.perf_counter()
            report = warm.boot()
            boots.append((time.perf_counter() - t0) * 1e3)
            assert report.kind == "warm" and report.snapshot_segments == CHAIN_SEGMENTS, \
                (report.reason, report.snapshot_segments, report.warnings)
            restores.append(report.restore_ms)
        out["chain_segments"] = CHAIN_SEGMENTS
        out["chain_bytes"] = report.snapshot_bytes
        out["chain_restore_ms"] = round(statistics.median(restores), 2)
        out["chain_warm_boot_ms"] = round(statistics.median(boots), 2)

        # Rewind, in the last process's session: 10 turns back, then to 50 back from the
        # end (each a link of the chain: restored warm, nothing re-read).
        turns = len(turn_ends(warm.stream.read().events))
        for back in (10, CHAIN_SEGMENTS):
            done = rewind(warm, turns - back)
            assert done.kind == "warm" and done.plan.replay_events == 0, done.plan
            out[f"rewind_{back}_turns_back_ms"] = round(done.ms, 2)
    return out
