"""`channel sessions list|rename|delete|restore|trash|empty-trash|search`: the sessions in
the data directory, managed as files (engine/session/manage.py). A session open in a Channel
is refused in one line; a deleted one waits in <data dir>/.trash until restored, or until
`empty-trash` deletes it for good."""

from __future__ import annotations

import argparse
import json
import time

from channel_cli.cli_args import data_dir
from engine.process.flags import add_engine_flags


def register(sub: argparse._SubParsersAction) -> None:
    """Add `sessions` and its actions to the `channel` command's subparsers."""
    sessions = sub.add_parser("sessions", help="list, rename, delete, restore or search sessions")
    actions = sessions.add_subparsers(metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="every session: last message, model, size, saved")
    listing.add_argument("--json", action="store_true", help="one JSON object per session")
    listing.set_defaults(handler=list_command)

    rename = actions.add_parser("rename", help="rename a session (all its files)")
    rename.add_argument("old", help="the session's name")
    rename.add_argument("new", help="its new name")
    rename.set_defaults(handler=rename_command)

    delete = actions.add_parser("delete", help="move a session to the trash (restore undoes it)")
    delete.add_argument("name", help="the session")
    delete.set_defaults(handler=delete_command)

    for word, hint in (("restore", "bring a deleted session back"),
                       ("undelete", "the same as restore")):
        restore = actions.add_parser(word, help=hint)
        restore.add_argument("entry", help="its trash entry (channel sessions trash lists them)")
        restore.set_defaults(handler=restore_command)

    trash = actions.add_parser("trash", help="the deleted sessions, newest first")
    trash.add_argument("--json", action="store_true", help="one JSON object per entry")
    trash.set_defaults(handler=trash_command)

    empty = actions.add_parser("empty-trash", help="delete the trash's sessions for good")
    empty.add_argument("--older-than", type=float, default=0.0, metavar="DAYS",
                       help="only those deleted at least DAYS ago (default: all)")
    empty.set_defaults(handler=empty_trash_command)

    search = actions.add_parser("search", help="sessions whose name or messages hold TEXT")
    search.add_argument("text", help="what to look for (case-insensitive)")
    search.add_argument("--json", action="store_true", help="one JSON object per session")
    search.set_defaults(handler=search_command)

    for action in (sessions, listing, rename, delete, restore, trash, empty, search):
        add_engine_flags(action, "data_dir", default=argparse.SUPPRESS)


def list_command(args: argparse.Namespace) -> int:
    from channel_tui import format as fmt
    from channel_tui.sessions import list_sessions

    infos = list_sessions(data_dir(args))
    if args.json:
        for info in infos:
            print(json.dumps({"name": info.name, "last_message": info.last_message,
                              "model": info.model or None, "size_bytes": info.size_bytes,
                              "last_saved": info.last_saved, "last_active": info.last_active},
                             ensure_ascii=False))
        return 0
    if not infos:
        print(f"no sessions in {data_dir(args)}")
        return 0
    now = time.time()
    rows = [(info.name, info.model or "-", fmt.size(info.size_bytes),
             fmt.ago(info.last_saved, now) if info.last_saved else "never",
             _fit(info.last_message, 50)) for info in infos]
    header = ("NAME", "MODEL", "SIZE", "SAVED", "LAST MESSAGE")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[4])
    return 0


def rename_command(args: argparse.Namespace) -> int:
    from engine.session.manage import rename_session

    rename_session(data_dir(args), args.old, args.new)
    print(f"renamed {args.old!r} to {args.new!r}")
    return 0


def delete_command(args: argparse.Namespace) -> int:
    from engine.session.manage import delete_session

    entry = delete_session(data_dir(args), args.name)
    print(f"deleted {args.name!r}: its files are in {entry.path}")
    print(f"undo with: channel sessions restore {entry.entry}")
    return 0


def restore_command(args: argparse.Namespace) -> int:
    from engine.session.manage import restore_deleted

    name = restore_deleted(data_dir(args), args.entry)
    print(f"restored {name!r} from {args.entry}")
    return 0


def trash_command(args: argparse.Namespace) -> int:
    from channel_tui import format as fmt
    from engine.session.manage import list_trash

    entries = list_trash(data_dir(args))
    for entry in entries:
        if args.json:
            print(json.dumps({"entry": entry.entry, "name": entry.name,
                              "deleted_at": entry.deleted_at, "size_bytes": entry.size_bytes}))
        else:
            print(f"{entry.entry}  {entry.name}  {fmt.size(entry.size_bytes)}  "
                  f"deleted {fmt.ago(entry.deleted_at)}")
    if not entries and not args.json:
        print("the trash is empty")
    return 0


def empty_trash_command(args: argparse.Namespace) -> int:
    from channel_tui import format as fmt
    from engine.session.manage import empty_trash

    if args.older_than < 0:
        raise ValueError(f"--older-than must be 0 or more days, not {args.older_than:g}")
    removed = empty_trash(data_dir(args), args.older_than * 86400.0)
    for entry in removed:
        print(f"removed {entry.entry}  {entry.name}  {fmt.size(entry.size_bytes)}")
    if not removed:
        print("nothing to remove")
    return 0


def search_command(args: argparse.Namespace) -> int:
    from engine.session.search import search_sessions

    hits = search_sessions(data_dir(args), args.text)
    for hit in hits:
        if args.json:
            print(json.dumps({"session": hit.session, "where": hit.where,
                              "excerpt": hit.excerpt}, ensure_ascii=False))
        else:
            print(f"{hit.session}: " + ("(its name)" if hit.where == "name"
                                        else f"{hit.where}: {hit.excerpt}"))
    if not hits and not args.json:
        print(f"no session holds {args.text!r}")
    return 0


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
