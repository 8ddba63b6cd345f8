"""Is the saved state the state a cold replay of the stream builds? (`channel snapshot verify`)

The product's promise is that a warm boot lands where a cold one would. This checks it on
copies of a session's files (the originals are never touched: a boot may set a snapshot
aside, or write a system prompt into an empty stream): one copy boots warm, one cold, and
the two states are compared.

- Always: the clock (counting the tokens a capped replay leaves out at the front) and the
  transcript, messages and whether it awaits a reply.
- While neither ring has evicted, rebased or skipped anything: slot for slot, the clocks,
  positions and active flags, and the keys, values and layer planes within a tolerance (a
  replay prefills in batches where the live run fed a token at a time, so the floats differ
  in their last bits; on a quantized backend by more).

A capped replay cannot rebuild what eviction chose: it holds the newest tokens, where the
live ring holds the most salient ones. Past that point only the clock and the transcript are
compared (docs/snapshot.md).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..backends.base import Backend
from ..model.model import Model
from ..paths import SessionFiles
from ..snapshot.chain_walk import segment_names
from ..state.ring_policy import RingPolicy
from .session import Session

# Largest |difference| allowed between warm and cold K/V, relative to the largest |value|
# in the plane: batched and token-at-a-time float sums differ by ~1e-6 on numpy. On ggml a
# token at a time rounds the activations to 8-bit blocks where a batch expands the weights to
# f32, and the difference grows through the layers: ~1e-3 on a llama-shaped model; on the
# quantized hybrid test models (tests/fixtures/arch) 1-4% typically after a crash trial and
# 7.2% at worst (a key of the attention layer after three delta-rule layers, 2026-12-07),
# where 5% had been the limit. A key of another token or position differs by about its own
# size, so this still finds those.
TOLERANCE = {"numpy": 1e-4}
QUANTIZED_TOLERANCE = 0.15


@dataclass
class VerifyReport:
    session: str
    warm_kind: str  # "warm", or "cold" when the snapshot could not be used
    warm_reason: str
    warm_clock: int = 0
    cold_clock: int = 0
    skipped_tokens: int = 0  # what the cold replay left out at the front (a capped replay)
    warm_skipped: int = 0  # what the warm state's replays left out, since its last cold one
    compared_slots: int = 0  # slots compared one by one (0: eviction made that impossible)
    max_rel_diff: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict:
        return {"session": self.session, "ok": self.ok, "warm_kind": self.warm_kind,
                "warm_reason": self.warm_reason, "warm_clock": self.warm_clock,
                "cold_clock": self.cold_clock, "skipped_tokens": self.skipped_tokens,
                "warm_skipped": self.warm_skipped,
                "compared_slots": self.compared_slots,
                "max_rel_diff": float(f"{self.max_rel_diff:.3g}"), "problems": self.problems}


def verify_session(model: Model, data_dir: Path, name: str, policy: RingPolicy | None = None,
                   backend: Backend | None = None) -> VerifyReport:
    """Boot copies of session `name` warm and cold and compare them (see the module doc)."""
    source = SessionFiles(Path(data_dir), name)
    if not source.stream.exists():
        raise FileNotFoundError(f"session {name!r} has no stream in {data_dir}")
    with tempfile.TemporaryDirectory(prefix="channel-verify-") as scratch:
        copy = SessionFiles(Path(scratch), name)
        shutil.copyfile(source.stream, copy.stream)
        if source.snapshot.is_file():
            shutil.copyfile(source.snapshot, copy.snapshot)
            if names := segment_names(source.snapshot_chain):
                copy.snapshot_chain.mkdir()
                for segment in names:
                    shutil.copyfile(source.snapshot_chain / segment,
                                    copy.snapshot_chain / segment)
        warm = Session(model, Path(scratch), name, policy, backend)
        warm_report = warm.boot()
        cold = Session(model, Path(scratch), name, policy, backend)
        cold.boot(cold=True)
        report = VerifyReport(name, warm_report.kind, warm_report.reason,
                              warm.conversation.ring.clock, cold.conversation.ring.clock,
                              cold.skipped_tokens, warm.skipped_tokens)
        compare(warm, cold, report)
    return report


def compare(warm: Session, cold: Session, report: VerifyReport) -> None:
    """Fill `report.problems` with every way the warm session differs from the cold one."""
    problems = report.problems

    def counted(clock: int, skipped: int) -> str:
        return f"{clock}" + (f" + {skipped} skipped" if skipped else "")

    if report.warm_clock + report.warm_skipped != report.cold_clock + report.skipped_tokens:
        problems.append(f"clock {counted(report.warm_clock, report.warm_skipped)} warm, "
                        f"{counted(report.cold_clock, report.skipped_tokens)} cold")
    if warm.transcript.messages != cold.transcript.messages:
        problems.append(f"transcript: {len(warm.transcript.messages)} messages warm, "
                        f"{len(cold.transcript.messages)} cold, or they differ")
    if warm.transcript.awaiting_reply != cold.transcript.awaiting_reply:
        problems.append(f"awaiting a reply: {warm.transcript.awaiting_reply} warm, "
                        f"{cold.transcript.awaiting_reply} cold")
    w, c = warm.conversation.ring, cold.conversation.ring
    if report.skipped_tokens or report.warm_skipped or any(
            ring.evicted or ring.rebases for ring in (w, c)):
        return  # slot by slot is not comparable (module doc)
    if w.n_active != c.n_active:
        problems.append(f"active slots {w.n_active} warm, {c.n_active} cold")
        return
    n = w.n_active
    wv, cv = warm.conversation.arena.views(), cold.conversation.arena.views()
    for region in ("slot_clock", "slot_pos", "slot_active"):
        if not np.array_equal(getattr(wv, region)[:n], getattr(cv, region)[:n]):
            problems.append(f"{region} differs")
    limit = TOLERANCE.get(warm.conversation.backend.name, QUANTIZED_TOLERANCE)
    planes = {"k_cache": (slice(None), slice(0, n)), "v_cache": (slice(None), slice(0, n))}
    planes.update({name: (slice(None),) for name in w.planes})
    for region, index in planes.items():
        a = np.asarray(getattr(wv, region)[index], np.float32)
        b = np.asarray(getattr(cv, region)[index], np.float32)
        scale = max(float(np.abs(b).max(initial=0.0)), 1e-12)
        rel = float(np.abs(a - b).max(initial=0.0)) / scale
        report.max_rel_diff = max(report.max_rel_diff, rel)
        if not rel <= limit:
            problems.append(f"{region} differs by {rel:.3g} of its largest value "
                            f"(tolerance {limit:g})")
    report.compared_slots = n
