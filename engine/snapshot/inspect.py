"""`channel snapshot inspect PATH`: a snapshot's header, identity and validation result, and
its chain: each segment's turn, clock range, rows, bytes and validity (docs/snapshot.md)."""

from __future__ import annotations

from pathlib import Path

from ..model.model import Model
from .chain_walk import walk_chain
from .format import SnapshotError
from .restore import _close, check_compatible, read_snapshot
from .segment import turn_of


def inspect_snapshot(path: Path, model: Model | None = None) -> dict:
    """Validate structure and checksum (and compatibility with `model`, if given)."""
    report: dict = {"path": str(path), "valid": False}
    try:
        report["size"] = Path(path).stat().st_size
        snap = read_snapshot(Path(path))
    except (SnapshotError, OSError) as exc:
        report["error"] = str(exc) if isinstance(exc, SnapshotError) else exc.strerror
        return report
    try:
        h = snap.header
        report["header"] = {
            "magic": "SNAP", "version": h.version, "clock": h.clock,
            "num_anchors": h.num_anchors, "num_layers": h.num_layers, "kv_dim": h.kv_dim,
            "max_slots": h.max_slots, "total_ingested": h.total_ingested,
            "stream_id": h.stream_id, "turn_boundary_count": len(h.turn_boundaries),
            "turn_boundaries": list(h.turn_boundaries),
        }
        report["active_slots"] = snap.sections.n_active
        report["kv_bytes"] = snap.sections.kv_bytes
        report["planes_bytes"] = snap.sections.planes_bytes  # hybrid layers' state (v3)
        report["identity"] = snap.identity
        report["checksum"] = "ok"
        if model is not None:
            from ..conversation import Conversation
            from ..state.ring_policy import RingPolicy

            conv = Conversation(model, RingPolicy(max_slots=h.max_slots))
            check_compatible(snap, conv)
            report["compatible_with"] = model.name
        report["valid"] = True
        report["chain"] = _chain(snap)
    except SnapshotError as exc:
        report["error"] = str(exc)
    finally:
        _close(snap.mapping)
    return report


def _chain(snap) -> dict:
    """The segments after the base, as walk_chain judges them (the base's own context
    length bounds their positions; a model's check is the base's)."""
    context = snap.identity.get("geometry", {}).get("context_length")
    chain = walk_chain(snap, context if isinstance(context, int) else 1 << 62)
    try:
        segments = [{"file": seg.path.name, "seq": seg.header.seq,
                     "turn": turn_of(seg.array("counters")),
                     "clocks": [seg.header.prev_clock, seg.header.clock],
                     "rows": seg.header.n_dirty, "bytes": seg.header.size,
                     "stream_id": seg.header.stream_id, "valid": True}
                    for seg in chain.segments]
    finally:
        chain.close()
    if chain.stopped:
        name, _, reason = chain.stopped.partition(": ")
        segments.append({"file": name, "valid": False, "reason": reason})
        segments += [{"file": n, "valid": False, "reason": "after an invalid segment"}
                     for n in chain.ignored[1:]]
    return {"segments": segments, "restorable": len(chain.segments),
            "bytes": snap.size + sum(s.get("bytes", 0) for s in segments if s["valid"])}


def render_inspection(report: dict) -> str:
    lines = [f"{report['path']}: {'valid' if report['valid'] else 'INVALID'}"]
    if "error" in report:
        lines.append(f"  reason: {report['error']}")
    header = report.get("header", {})
    for key, value in header.items():
        if key != "turn_boundaries":
            lines.append(f"  {key:<20} {value}")
    if "active_slots" in report:
        lines.append(f"  {'active_slots':<20} {report['active_slots']}")
        lines.append(f"  {'kv_bytes':<20} {report['kv_bytes']:,}")
        if report.get("planes_bytes"):
            lines.append(f"  {'planes_bytes':<20} {report['planes_bytes']:,}")
    identity = report.get("identity", {})
    for key in ("model_name", "model_fingerprint", "k_dtype", "v_dtype", "max_slots",
                "backend"):
        if key in identity:
            lines.append(f"  {key:<20} {identity[key]}")
    chain = report.get("chain")
    if chain and chain["segments"]:
        lines.append(f"  chain: {chain['restorable']} of {len(chain['segments'])} segments "
                     f"restorable, {chain['bytes']:,} bytes with the base")
        for seg in chain["segments"]:
            if seg["valid"]:
                first, last = seg["clocks"]
                lines.append(f"    {seg['file']}  turn {seg['turn']:<5} clock {first}..{last}"
                             f"  {seg['rows']} rows  {seg['bytes']:,} bytes  valid")
            else:
                lines.append(f"    {seg['file']}  INVALID: {seg['reason']}")
    return "\n".join(lines)
