"""What each `channel` subcommand does (cli.py parses the command line)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys

from channel_cli.cli_args import (
    backend_and_model,
    cache_dir,
    data_dir,
    model_roots,
    opt,
    pick_backend,
    remember_model,
    sampling_overrides,
    session_data_dir,
    use_session_model,
)
from engine.errors import ChannelError, SessionBusyError
from engine.paths import SessionFiles
from engine.process.protocol import DEFAULT_MAX_MESSAGE_BYTES, Limits, message_problem, text_problem


def chat(args: argparse.Namespace) -> int:
    from engine.session.owner import acquire_session
    from engine.session.session import Session
    from engine.state.sampling_defaults import defaults_for

    asked = sampling_overrides(args)  # checked before anything loads
    if args.max_tokens < 1:
        raise ValueError(f"--max-tokens must be at least 1, got {args.max_tokens}")
    problem = message_problem(args.message, Limits())
    if problem:
        raise ValueError(f"the message {problem}")
    _check_system_option(args)
    from engine.paths import check_session_name

    name = check_session_name(opt(args, "session", "default"))
    directory = session_data_dir(args)
    try:  # one writer per session; asked before the model loads, so refused at once
        owner = acquire_session(directory, name)
    except SessionBusyError as exc:
        raise SessionBusyError(exc.session, exc.pid, "use channel send to add to it") \
            from None
    session = None
    try:
        use_session_model(args, name)
        backend, model = backend_and_model(args)
        session = Session(model, directory, name, backend=backend)
        boot = session.open(cold=bool(opt(args, "cold", False)), owner=owner,
                            system=args.system)
        if session.keeps_its_system_prompt(args.system):
            print(f"channel: warning: session {name!r} keeps its system prompt; --system "
                  f"applies to a new session (or `channel fork {name} NEW --system ...`)",
                  file=sys.stderr)
        settings = defaults_for(model.recommended_sampling).with_overrides(asked)
        return _chat_turn(args, session, boot, settings, model, backend)
    finally:
        if session is not None:
            session.close()
        owner.release()


def _chat_turn(args: argparse.Namespace, session, boot, settings, model, backend) -> int:
    """The turn of `chat`, on a session it holds."""
    remember_model(args, session.name, model)
    for warning in boot.warnings:
        print(f"channel: warning: {warning}", file=sys.stderr)
    if not args.json:
        print(boot_line(boot, session), file=sys.stderr)
    stream_text = None if args.json else _print_piece
    result = session.turn(args.message, settings, args.max_tokens, on_text=stream_text)
    saved = session.save(wait=True)
    if saved.error:
        print(f"channel: warning: snapshot not saved: {saved.error}", file=sys.stderr)
    ring = session.conversation.ring
    if args.json:
        print(json.dumps({
            "reply": result.reply,
            "reply_ids": result.reply_ids,
            "stop": result.stop,
            "prompt_tokens": result.prompt_tokens,
            "decode_tokens": len(result.reply_ids),
            "prefill_tok_s": round(result.prefill_tok_s, 2),
            "decode_tok_s": round(result.decode_tok_s, 2),
            "ttft_ms": round(result.ttft_ms, 1),
            "seed": result.seed,
            "ring_active": ring.n_active,
            "ring_anchors": ring.n_anchors,
            "clock": ring.clock,
            "boot": boot.kind,
            "boot_reason": boot.reason,
            "restore_ms": round(boot.restore_ms, 3),
            "replay_ms": round(boot.replay_ms, 3),
            "replayed_events": boot.replayed_events,
            "replayed_tokens": boot.replayed_tokens,
            "restored_slots": boot.restored_slots,
            "boot_phases_ms": {k: round(v, 3) for k, v in boot.phases_ms.items()},
            "snapshot": {"status": saved.status.name.lower(), "bytes": saved.bytes,
                         "ms": round(saved.ms, 3), "error": saved.error},
            "session": session.name,
            "model": model.name,
            "backend": backend.name,
        }, ensure_ascii=False))
    else:
        print()
    return 0


def boot_line(boot, session) -> str:
    """One line a person reads at startup: which boot, why, and what it cost, in the app's
    words (channel_tui/format.py)."""
    from channel_tui import format as fmt
    from engine.process.runtime import boot_fields, transcript_fields

    return fmt.boot_line({**boot_fields(boot), "transcript": transcript_fields(session)})


def _print_piece(piece: str) -> None:
    sys.stdout.write(piece)
    sys.stdout.flush()


def models(args: argparse.Namespace) -> int:
    from engine.backends import problems_running
    from engine.model.catalog import scan
    from engine.model.catalog_table import render_table

    entries = scan(model_roots())
    if args.json:
        for entry in entries:
            backends = problems_running(entry.features, entry.architecture or "?") \
                if entry.supported else {}
            print(json.dumps({**entry.to_json(), "backends": backends}, ensure_ascii=False))
    else:
        print(render_table(entries))
    return 0


def perplexity(args: argparse.Namespace) -> int:
    from engine.tools.perplexity import perplexity

    text = args.text.read_text(encoding="utf-8")
    backend, model = backend_and_model(args)
    result = perplexity(model, text, args.ring_slots, backend, args.evict)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['tokens']} tokens, perplexity {result['perplexity']:.3f} "
              f"(ring {result['ring_slots']} slots, {result['evict']}, "
              f"{result['evicted']} evicted, "
              f"{result['rebases']} rebases, {result['backend']})")
    return 0


def eval_memory(args: argparse.Namespace) -> int:
    import dataclasses

    from engine.tools.eval_memory import QUICK, EvalParams, evaluate_memory
    from engine.tools.eval_memory_table import render_memory_table

    params = QUICK if args.quick else EvalParams()
    # Checked before the evaluation's minutes, not after them.
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        raise ValueError("--plot needs matplotlib: pip install 'channel[plot]'")
    if args.conversations is not None:
        if args.conversations < 1:
            raise ValueError("--conversations must be at least 1")
        params = dataclasses.replace(params, conversations=args.conversations)
    backend, model = backend_and_model(args)

    def progress(done: int, total: int, running: str) -> None:
        filled = 30 * done // total
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done}/{total} {running:<14}")
        sys.stderr.flush()
        if done == total:
            sys.stderr.write("\n")

    result = evaluate_memory(model, backend, params, progress)
    print(json.dumps(result) if args.json else render_memory_table(result))
    if args.plot is not None:
        from engine.tools.eval_memory_plot import plot_memory

        plot_memory(result, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def send(args: argparse.Namespace) -> int:
    """Append a user event; a running engine with the session open answers it."""
    import time

    from engine.paths import check_session_name
    from engine.session.replay import WITHDRAWS, reply_target
    from engine.session.stream import StreamLog, id_order
    from engine.session.turns import MAX_TOKENS
    from engine.state.sampling import MAX_REPLY_TOKENS

    problem = message_problem(args.text, Limits())  # what the engine would take in a turn
    if problem:
        raise ValueError(f"the message {problem}")
    asked = {}
    if args.max_tokens is not None:
        if not 0 < args.max_tokens <= MAX_REPLY_TOKENS:
            raise ValueError(f"--max-tokens must be from 1 to {MAX_REPLY_TOKENS}, "
                             f"got {args.max_tokens}")
        asked[MAX_TOKENS] = args.max_tokens  # the engine answers with it (docs/stream.md)
    name = check_session_name(opt(args, "session", "default"))
    log = StreamLog(SessionFiles(session_data_dir(args), name).stream)
    start = log.read()
    sent = log.append("user", args.text, **asked)
    if args.no_wait:
        print(sent.id)
        return 0
    offset, deadline = start.end_offset, time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        read = log.read(offset)
        offset = read.end_offset
        for event in read.events:
            if event.extra.get(WITHDRAWS) == sent.id:
                raise ChannelError(f"the engine took message {sent.id} back out "
                                   f"({event.extra.get('stop')}): it was not answered")
            # Our reply names our message. One naming a later message answers ours too:
            # messages left waiting by a crash are answered together (docs/stream.md).
            target = reply_target(event)
            if target is not None and id_order(target) >= id_order(sent.id):
                print(event.content)
                return 0
        time.sleep(0.2)
    print(f"channel: sent {sent.id}; no engine answered within {args.timeout:g} s (the "
          f"message is kept and answered when session {name!r} is next opened)",
          file=sys.stderr)
    return 3


def _check_system_option(args: argparse.Namespace) -> bool:
    """Whether --system was given; ValueError, in one line, if it is not a usable text."""
    if args.system is None:
        return False
    if problem := text_problem(args.system, DEFAULT_MAX_MESSAGE_BYTES):
        raise ValueError(f"--system {problem}")
    return True


def fork(args: argparse.Namespace) -> int:
    """Works beside a running engine: a fork copies the last snapshot and the whole stream,
    and the new session replays whatever the snapshot does not hold yet."""
    from engine.session.fork import fork_session

    check = None
    if _check_system_option(args):  # the fork's template must take it: the source's model
        use_session_model(args, args.source)
        check = backend_and_model(args)[1].template.check_system_prompt
    report = fork_session(session_data_dir(args), args.source, args.new, args.system, check,
                          turn=args.turn)
    state = (f"snapshot {report.snapshot_bytes:,} bytes" if report.snapshot_bytes
             else "a new system prompt: it replays, cold" if report.system_changed
             else "no snapshot: it boots cold")
    at = "" if report.turn is None else f" at turn {report.turn}"
    print(f"forked {report.source!r}{at} as {report.name!r}: {report.events} events, {state}")
    return 0


def doctor(args: argparse.Namespace) -> int:
    from engine.tools.doctor import diagnose, render

    report = diagnose(opt(args, "model"), data_dir(args), cache_dir(args))
    print(json.dumps(report) if args.json else render(report))
    return 0


def bench(args: argparse.Namespace) -> int:
    from engine.tools.bench import run_benchmarks

    result = run_benchmarks(opt(args, "model"), cache_dir(args), quick=args.quick,
                            scratch_dir=data_dir(args), backend=pick_backend(args).backend,
                            only_snapshots=args.snapshots)
    print(json.dumps(result))
    return 0
