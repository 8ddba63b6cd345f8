"""`channel rewind SESSION --turn N`: continue a session from the end of an earlier turn
(engine/session/rewind.py). It says first whether the state comes back warm, from a kept
snapshot link, or by re-reading the conversation; `--dry-run` stops there."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def register(sub: argparse._SubParsersAction,
             add_common: Callable[[argparse.ArgumentParser], None]) -> None:
    rewind = sub.add_parser("rewind", help="continue a session from an earlier turn")
    rewind.add_argument("name", help="the session")
    rewind.add_argument("--turn", type=int, required=True,
                        help="the turn to continue from (0: the system prompt alone)")
    rewind.add_argument("--dry-run", action="store_true",
                        help="only say what it would do: restore warm, or re-read")
    add_common(rewind)
    rewind.set_defaults(handler=rewind_command)


def rewind_command(args: argparse.Namespace) -> int:
    from channel_cli.cli_args import backend_and_model, session_data_dir, use_session_model
    from engine.paths import check_session_name
    from engine.session.manage import session_exists
    from engine.session.owner import acquire_session
    from engine.session.rewind import plan_rewind, rewind
    from engine.session.session import Session

    name = check_session_name(args.name)
    directory = session_data_dir(args)
    if not session_exists(directory, name):
        raise ValueError(f"no session {name!r} in {directory}")
    owner = acquire_session(directory, name)  # refused in one line while a Channel has it
    session = None
    try:
        use_session_model(args, name)
        backend, model = backend_and_model(args)
        session = Session(model, directory, name, backend=backend)
        session.open(owner=owner)
        plan = plan_rewind(session, args.turn)
        print(plan.describe())
        if args.dry_run:
            return 0
        report = rewind(session, args.turn)
        session.save()
        print(f"rewound {name!r} to turn {plan.turn}: {len(plan.retracted)} message(s) "
              f"retracted, rebuilt {report.kind} in {report.ms:.0f} ms")
        return 0
    finally:
        if session is not None:
            session.close()
        owner.release()
