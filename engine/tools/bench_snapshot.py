"""Snapshot benchmarks: save and restore of a full ring, against the disk and page cache,
warm against cold boot, and decoding while a save is being written."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from ..model.model import Model
from ..session.session import Session
from ..snapshot.snapshotter import SnapshotStatus
from ..state.ring_policy import RingPolicy
from ..state.sampler import SamplingSettings

MB = 1e6


def _median(values: list[float]) -> float:
    return statistics.median(values)


def conversation_text(model: Model, tokens: int) -> list[tuple[str, str]]:
    """(user, assistant) pairs of ordinary prose whose rendering is about `tokens` long."""
    sentence = ("The keeper of the lighthouse wrote down the weather every evening, and the "
                "ships that passed, and the names of the birds that rested on the rail. ")
    pairs, total = [], 0
    per_turn = len(model.tokenizer.encode(sentence * 6)) * 2 + 12
    while total + per_turn <= tokens:
        pairs.append((sentence * 6, sentence * 6))
        total += per_turn
    return pairs


def write_stream(session: Session, pairs: list[tuple[str, str]]) -> None:
    for user, assistant in pairs:
        session.stream.append("user", user)
        session.stream.append("assistant", assistant)


def disk_write_mb_s(directory: Path, nbytes: int) -> float:
    block = np.random.default_rng(0).integers(0, 255, 1 << 20, dtype=np.uint8).tobytes()
    path = directory / "disk-probe.bin"
    t0 = time.perf_counter()
    with open(path, "wb", buffering=0) as f:
        for _ in range(nbytes // len(block)):
            f.write(block)
        os.fsync(f.fileno())
    elapsed = time.perf_counter() - t0
    path.unlink()
    return nbytes / elapsed / MB


def page_cache_read_mb_s(path: Path, repeat: int) -> float:
    size = path.stat().st_size
    buffer = bytearray(size)  # zero-filled, so already faulted in: this times the read alone
    times = []
    for _ in range(repeat):
        with open(path, "rb", buffering=0) as f:
            t0 = time.perf_counter()
            f.readinto(buffer)
            times.append(time.perf_counter() - t0)
    return size / _median(times) / MB


def decode_rate(session: Session, tokens: int, during_save: bool) -> float:
    """tok/s of `tokens` decode steps, optionally with a save started at the first one."""
    forward = session.conversation.forward
    t0 = time.perf_counter()
    for i in range(tokens):
        if during_save and i == 0:
            assert session.save(wait=False).status == SnapshotStatus.SAVED
        forward.decode_one_token(100 + i)
    rate = tokens / (time.perf_counter() - t0)
    session.snapshots.wait()
    return rate


def run_snapshot_benchmarks(model: Model, scratch: Path, repeat: int, context: int,
                            backend=None) -> dict:
    """Needs `context` tokens of real prefill once; everything else reuses that state."""
    out: dict = {}
    policy = RingPolicy()
    with tempfile.TemporaryDirectory(dir=scratch, prefix="snapbench-") as tmp:
        data = Path(tmp)
        cold = Session(model, data, "bench", policy, backend)
        write_stream(cold, conversation_text(model, context))
        cold.boot()  # writes the system event first
        cold = Session(model, data, "bench", policy, backend)
        cold_report = cold.boot(cold=True)
        out["cold_replay_tokens"] = cold_report.replayed_tokens
        out["cold_replay_ms"] = round(cold_report.replay_ms, 1)

        # Fill the rest of the ring by decoding, then time full-ring saves.
        forward = cold.conversation.forward
        while cold.conversation.ring.n_active < policy.max_slots:
            forward.decode_one_token(200)
        saves = []
        cold.snapshots.incremental = False  # complete saves here; bench_chain.py compares
        for _ in range(repeat):
            cold.snapshots.last_clock = None  # step past the zero-delta gate: same state again
            result = cold.save()
            saves.append(result.ms)
        size = result.bytes
        out["snapshot_bytes"] = size
        out["snapshot_slots"] = cold.conversation.ring.n_active
        out["snapshot_save_ms"] = round(_median(saves), 2)
        out["snapshot_save_mb_s"] = round(size / (_median(saves) / 1e3) / MB, 1)
        out["snapshot_exists_status"] = cold.save().status.name.lower()  # zero-delta gate
        out["disk_write_mb_s"] = round(disk_write_mb_s(data, size), 1)

        restores, boots = [], []
        for _ in range(repeat):
            warm = Session(model, data, "bench", policy, backend)
            t0 = time.perf_counter()
            report = warm.boot()
            boots.append((time.perf_counter() - t0) * 1e3)
            assert report.kind == "warm", report.reason
            restores.append(report.restore_ms)
        out["snapshot_restore_ms"] = round(_median(restores), 2)
        out["snapshot_restore_mb_s"] = round(size / (_median(restores) / 1e3) / MB, 1)
        out["warm_boot_ms"] = round(_median(boots), 2)
        out["page_cache_read_mb_s"] = round(page_cache_read_mb_s(cold.snapshots.path, repeat), 1)
        out["restore_vs_page_cache"] = round(
            out["snapshot_restore_mb_s"] / out["page_cache_read_mb_s"], 3
        )

        # Warm vs cold for the `context`-token conversation: replay against restore.
        small = Session(model, data, "ratio", policy, backend)
        write_stream(small, conversation_text(model, context))
        small.boot()
        small.save()
        warm_small = Session(model, data, "ratio", policy, backend)
        warm_report = warm_small.boot()
        out["warm_restore_ms_4000"] = round(warm_report.restore_ms, 2)
        out["warm_vs_cold_ratio"] = round(cold_report.replay_ms / warm_report.restore_ms, 1)

        rates_plain = [decode_rate(warm_small, 32, False) for _ in range(repeat)]
        rates_saving = []
        for _ in range(repeat):
            rates_saving.append(decode_rate(warm_small, 32, True))
        out["decode_during_save_ratio"] = round(_median(rates_saving) / _median(rates_plain), 3)
        del warm_small, small, cold
    out["greedy"] = SamplingSettings().temperature == 0.0
    return out
