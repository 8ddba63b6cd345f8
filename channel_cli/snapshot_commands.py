"""`channel snapshot inspect` and `channel snapshot verify` (cli.py parses the command line)."""

from __future__ import annotations

import argparse
import json

from channel_cli.cli_args import (
    backend_and_model,
    data_dir,
    load_model_with_progress,
    opt,
    use_session_model,
)


def snapshot_inspect(args: argparse.Namespace) -> int:
    from engine.snapshot.inspect import inspect_snapshot, render_inspection

    model = load_model_with_progress(args) if opt(args, "model") else None
    report = inspect_snapshot(args.path, model)
    print(json.dumps(report) if args.json else render_inspection(report))
    return 0 if report["valid"] else 1


def snapshot_verify(args: argparse.Namespace) -> int:
    """Boot copies of a session warm and cold and compare them (engine/session/verify.py)."""
    from engine.paths import check_session_name
    from engine.session.verify import verify_session

    name = check_session_name(args.name)
    directory = data_dir(args)
    use_session_model(args, name)
    backend, model = backend_and_model(args)
    report = verify_session(model, directory, name, backend=backend)
    if args.json:
        print(json.dumps(report.as_dict()))
    else:
        print(render_verify(report))
    return 0 if report.ok else 1


def render_verify(report) -> str:
    state = ("warm boot" if report.warm_kind == "warm"
             else f"no warm state ({report.warm_reason}): cold against cold")
    verdict = "matches" if report.ok else "DIFFERS from"
    lines = [f"session {report.session!r}: the {state} {verdict} a cold replay of the stream",
             f"  clock {report.warm_clock:,} warm, {report.cold_clock:,} cold"
             + (f" + {report.skipped_tokens:,} tokens a capped replay leaves out"
                if report.skipped_tokens else "")]
    if report.compared_slots:
        lines.append(f"  {report.compared_slots:,} slots compared one by one; K/V within "
                     f"{report.max_rel_diff:.2g} of the largest value")
    else:
        lines.append("  slots not compared one by one: the ring has evicted or rebased "
                     "(docs/snapshot.md)")
    lines += [f"  problem: {problem}" for problem in report.problems]
    return "\n".join(lines)
