"""Cold against warm boot of one session, side by side: the product's demo in numbers."""

from __future__ import annotations

import time
from pathlib import Path

from ..model.model import Model
from ..state.ring_policy import RingPolicy
from .replay import ReplayProgress
from .session import Session


def compare_boots(model: Model, data_dir: Path, name: str, policy: RingPolicy | None = None,
                  backend=None, progress: ReplayProgress | None = None) -> dict:
    """Boot fresh copies of session `name` cold (replay everything, saying how far it got
    through `progress`) and warm (snapshot)."""
    cold = Session(model, data_dir, name, policy, backend)
    t0 = time.perf_counter()
    cold_report = cold.boot(cold=True, progress=progress)
    cold_ms = (time.perf_counter() - t0) * 1e3
    del cold
    warm = Session(model, data_dir, name, policy, backend)
    t0 = time.perf_counter()
    warm_report = warm.boot()
    warm_ms = (time.perf_counter() - t0) * 1e3
    del warm
    return {
        "cold_ms": round(cold_ms, 2),
        "cold_replay_ms": round(cold_report.replay_ms, 2),
        "cold_tokens": cold_report.replayed_tokens,
        "cold_events": cold_report.replayed_events,
        "warm_kind": warm_report.kind,
        "warm_reason": warm_report.reason,
        "warm_ms": round(warm_ms, 2),
        "warm_restore_ms": round(warm_report.restore_ms, 2),
        "warm_replay_ms": round(warm_report.replay_ms, 2),
        "warm_slots": warm_report.restored_slots,
        # Three significant digits: one decimal place was 6% off for a ratio under 1 (a tiny
        # session on numpy, where the warm boot's fixed costs outweigh a short replay).
        "ratio": float(f"{cold_ms / warm_ms:.3g}") if warm_ms > 0 else None,
    }
