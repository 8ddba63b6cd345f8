"""`channel`: the command line. Every expected failure is one line on stderr, exit status 2.

The subcommands' work is in commands.py; the options they share in cli_args.py.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from channel_cli import app_command, commands, snapshot_commands
from channel_cli.cli_args import add_sampling_options, resolve_model_option
from channel_cli.pull import add_pull_command
from engine.errors import ChannelError
from engine.process.flags import add_engine_flags


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = getattr(args, "handler", app_command.run_app)
    if handler is not app_command.run_app:  # the app's screen is no place for log lines
        _say_engine_log_in_one_line()
    try:
        resolve_model_option(args)
        return handler(args)
    except (ChannelError, ValueError, OSError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"channel: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130


class _OneLineLog(logging.Handler):
    """The engine's warnings, when it runs inside a command, as `channel: warning: ...`. A
    record that carries an exception is left out: the exception reaches main, which says it
    in one line (logging's last resort printed its traceback)."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info is None:
            print(f"channel: {record.levelname.lower()}: {record.getMessage()}",
                  file=sys.stderr)


def _say_engine_log_in_one_line() -> None:
    logger = logging.getLogger("channel")
    if not any(isinstance(h, _OneLineLog) for h in logger.handlers):
        logger.addHandler(_OneLineLog(logging.WARNING))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="channel",
        description="Chat with a local model that keeps its working memory across restarts.",
    )
    _add_common(parser)
    # The app (`channel` with no command) takes the generation options `chat` takes; they
    # apply to every reply, under each session's own settings (F6).
    parser.add_argument("--max-tokens", type=int, default=argparse.SUPPRESS,
                        help="the longest reply (default 512)")
    add_sampling_options(parser, default=argparse.SUPPRESS)
    add_engine_flags(parser, "ring_slots", "evict", default=argparse.SUPPRESS)
    sub = parser.add_subparsers(metavar="COMMAND")

    chat = sub.add_parser("chat", help="run one turn and print the reply")
    _add_common(chat)
    chat.add_argument("message", help="the user's message")
    chat.add_argument("--max-tokens", type=int, default=256)
    chat.add_argument("--system", default=None, metavar="TEXT",
                      help="a new session's system prompt (default: the model template's)")
    add_sampling_options(chat)
    chat.add_argument("--json", action="store_true", help="print one JSON object")
    chat.set_defaults(handler=commands.chat)

    ppl = sub.add_parser("perplexity", help="perplexity of a text read through the engine")
    _add_common(ppl)
    ppl.add_argument("--text", required=True, type=Path, help="a UTF-8 text file")
    add_engine_flags(ppl, "ring_slots", "evict")
    ppl.add_argument("--json", action="store_true")
    ppl.set_defaults(handler=commands.perplexity)

    send = sub.add_parser("send", help="append a message to a session's stream")
    _add_common(send)
    send.add_argument("text", help="the message")
    send.add_argument("--no-wait", action="store_true", help="do not wait for the reply")
    send.add_argument("--timeout", type=float, default=120.0, help="seconds to wait")
    send.add_argument("--max-tokens", type=int, default=None,
                      help="the longest reply to ask for (default: the engine's)")
    send.set_defaults(handler=commands.send)

    snap = sub.add_parser("snapshot", help="inspect snapshot files, verify a session's saved state")
    snap_sub = snap.add_subparsers(metavar="ACTION", required=True)
    inspect = snap_sub.add_parser("inspect", help="print a snapshot's header and validation")
    inspect.add_argument("path", type=Path)
    inspect.add_argument("--json", action="store_true")
    _add_common(inspect)
    inspect.set_defaults(handler=snapshot_commands.snapshot_inspect)
    verify = snap_sub.add_parser(
        "verify", help="check a session's saved state against a cold replay of its stream")
    verify.add_argument("name", help="the session")
    verify.add_argument("--json", action="store_true", help="print one JSON object")
    _add_common(verify)
    verify.set_defaults(handler=snapshot_commands.snapshot_verify)

    models = sub.add_parser("models", help="list the GGUF models on this machine")
    models.add_argument("--json", action="store_true",
                        help="one JSON object per model, one per line (docs/models.md)")
    models.set_defaults(handler=commands.models)
    add_pull_command(sub)

    fork = sub.add_parser("fork", help="copy a session (state and stream) under a new name")
    fork.add_argument("source", help="the session to fork")
    fork.add_argument("new", help="the new session's name")
    fork.add_argument("--system", default=None, metavar="TEXT",
                      help="start the fork from this system prompt (it replays, cold)")
    fork.add_argument("--turn", type=int, default=None, metavar="N",
                      help="continue from the end of the source's turn N (0: the system "
                           "prompt alone), warm where a saved state that old is kept")
    _add_common(fork)
    fork.set_defaults(handler=commands.fork)

    doctor = sub.add_parser("doctor", help="what Channel finds on this machine")
    _add_common(doctor)
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    doctor.set_defaults(handler=commands.doctor)

    ev = sub.add_parser("eval", help="evaluations")
    ev_sub = ev.add_subparsers(metavar="WHAT", required=True)
    memory = ev_sub.add_parser("memory", help="what each eviction policy keeps (docs/memory.md)")
    _add_common(memory)
    memory.add_argument("--json", action="store_true", help="print one JSON object")
    memory.add_argument("--quick", action="store_true", help="one short conversation")
    memory.add_argument("--conversations", type=int, default=None, help="seeded conversations")
    memory.add_argument("--plot", type=Path, default=None, metavar="FILE.png",
                        help="also draw recall and perplexity against budget (the plot extra)")
    memory.set_defaults(handler=commands.eval_memory)

    bench = sub.add_parser("bench", help="benchmarks, as JSON")
    _add_common(bench)
    bench.add_argument("--json", action="store_true", help="print one JSON object (default)")
    bench.add_argument("--quick", action="store_true", help="fewer repeats, for smoke tests")
    bench.add_argument("--snapshots", action="store_true",
                       help="only the snapshot and snapshot-chain figures")
    bench.set_defaults(handler=commands.bench)

    # `channel sessions ...` (issue 30, item 3): its parser and work in sessions_command.py;
    # the app's preferences (the theme, the last session) are kept in --config-dir.
    from channel_cli import rewind_command, sessions_command

    parser.add_argument("--config-dir", type=Path, default=argparse.SUPPRESS,
                        help="where the app keeps preferences.json (default: the platform's)")
    sessions_command.register(sub)
    rewind_command.register(sub, _add_common)
    return parser


def _add_common(p: argparse.ArgumentParser) -> None:
    # SUPPRESS lets the option be given before or after the subcommand.
    d = argparse.SUPPRESS
    add_engine_flags(p, "data_dir", "cache_dir", "model", "backend", default=d)
    p.add_argument("--session", default=d, help="session name (default: 'default')")
    p.add_argument("--cold", action="store_true", default=d, help="ignore the snapshot")


if __name__ == "__main__":
    sys.exit(main())
