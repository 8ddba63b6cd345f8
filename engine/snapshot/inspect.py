"""`channel snapshot inspect PATH`: a snapshot's header, identity and validation result."""

from __future__ import annotations

from pathlib import Path

from ..model.model import Model
from .format import SnapshotError
from .restore import _close, check_compatible, read_snapshot


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
    except SnapshotError as exc:
        report["error"] = str(exc)
    finally:
        _close(snap.mapping)
    return report


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
    return "\n".join(lines)
