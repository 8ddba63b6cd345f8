"""`channel`: the command line. Every expected failure is one line on stderr, exit status 2."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from .errors import ChannelError
from .paths import default_cache_dir, default_data_dir
from .process.protocol import BACKEND_CHOICES, Limits, message_problem


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = getattr(args, "handler", _run_app)
    try:
        _resolve_model_option(args)
        return handler(args)
    except (ChannelError, ValueError, OSError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"channel: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="channel",
        description="Chat with a local model that keeps its working memory across restarts.",
    )
    _add_common(parser)
    sub = parser.add_subparsers(metavar="COMMAND")

    chat = sub.add_parser("chat", help="run one turn and print the reply")
    _add_common(chat)
    chat.add_argument("message", help="the user's message")
    chat.add_argument("--max-tokens", type=int, default=256)
    chat.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default)")
    chat.add_argument("--top-k", type=int, default=0)
    chat.add_argument("--top-p", type=float, default=1.0)
    chat.add_argument("--seed", type=int, default=None)
    chat.add_argument("--json", action="store_true", help="print one JSON object")
    chat.set_defaults(handler=_chat)

    ppl = sub.add_parser("perplexity", help="perplexity of a text read through the engine")
    _add_common(ppl)
    ppl.add_argument("--text", required=True, type=Path, help="a UTF-8 text file")
    ppl.add_argument("--ring-slots", type=int, default=None, help="ring size (small: evicts)")
    ppl.add_argument("--json", action="store_true")
    ppl.set_defaults(handler=_perplexity)

    send = sub.add_parser("send", help="append a message to a session's stream")
    _add_common(send)
    send.add_argument("text", help="the message")
    send.add_argument("--no-wait", action="store_true", help="do not wait for the reply")
    send.add_argument("--timeout", type=float, default=120.0, help="seconds to wait")
    send.set_defaults(handler=_send)

    snap = sub.add_parser("snapshot", help="inspect snapshot files")
    snap_sub = snap.add_subparsers(metavar="ACTION", required=True)
    inspect = snap_sub.add_parser("inspect", help="print a snapshot's header and validation")
    inspect.add_argument("path", type=Path)
    inspect.add_argument("--json", action="store_true")
    _add_common(inspect)
    inspect.set_defaults(handler=_snapshot_inspect)

    models = sub.add_parser("models", help="list the GGUF models on this machine")
    models.add_argument("--json", action="store_true",
                        help="one JSON object per model, one per line (docs/models.md)")
    models.set_defaults(handler=_models)

    fork = sub.add_parser("fork", help="copy a session (state and stream) under a new name")
    fork.add_argument("source", help="the session to fork")
    fork.add_argument("new", help="the new session's name")
    _add_common(fork)
    fork.set_defaults(handler=_fork)

    doctor = sub.add_parser("doctor", help="what Channel finds on this machine")
    _add_common(doctor)
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    doctor.set_defaults(handler=_doctor)

    bench = sub.add_parser("bench", help="benchmarks, as JSON")
    _add_common(bench)
    bench.add_argument("--json", action="store_true", help="print one JSON object (default)")
    bench.add_argument("--quick", action="store_true", help="fewer repeats, for smoke tests")
    bench.set_defaults(handler=_bench)
    return parser


def _add_common(p: argparse.ArgumentParser) -> None:
    # SUPPRESS lets the option be given before or after the subcommand.
    d = argparse.SUPPRESS
    p.add_argument("--data-dir", type=Path, default=d, help="where sessions live")
    p.add_argument("--cache-dir", type=Path, default=d, help="where weight images are cached")
    p.add_argument("--session", default=d, help="session name (default: 'default')")
    p.add_argument("--model", default=d,
                   help="a GGUF file, or a name `channel models` lists (e.g. qwen2.5:0.5b)")
    p.add_argument("--backend", choices=BACKEND_CHOICES, default=d,
                   help="auto: Vulkan on a GPU, else ggml (quantized CPU), else numpy")
    p.add_argument("--cold", action="store_true", default=d, help="ignore the snapshot")


def _opt(args: argparse.Namespace, name: str, default=None):
    return getattr(args, name, default)


def model_roots():
    """Where `channel models` and --model NAME look: this user's home and environment."""
    from .model.catalog_sources import default_roots

    return default_roots(os.environ, Path.home())


def _resolve_model_option(args: argparse.Namespace) -> None:
    """--model as a path from here on: a listed name is looked up in the catalog."""
    text = _opt(args, "model")
    if text is None or isinstance(text, Path):
        return
    from .model.catalog import resolve_model

    args.model = resolve_model(str(text), model_roots())


def _session_model(args: argparse.Namespace, name: str) -> None:
    """A session runs on the model it was made with (docs/models.md): set args.model to the
    recorded one, saying so when --model asked for another."""
    from .session.model_record import same_file, session_model

    record = session_model(data_dir(args), name)
    if record is None:
        return
    asked = _opt(args, "model")
    if asked is not None and not same_file(asked, record.path):
        print(f"channel: note: session {name!r} runs on model {record.name!r} "
              f"({record.path}); --model applies to new sessions", file=sys.stderr)
    args.model = Path(record.path)


def _remember_model(args: argparse.Namespace, name: str, model) -> None:
    from .session.model_record import read_record, write_record

    if read_record(data_dir(args), name) is None:
        write_record(data_dir(args), name, model.path, model.fingerprint, model.name)


def data_dir(args: argparse.Namespace) -> Path:
    explicit = _opt(args, "data_dir") or os.environ.get("CHANNEL_DATA_DIR")
    return Path(explicit) if explicit else default_data_dir()


def cache_dir(args: argparse.Namespace) -> Path:
    explicit = _opt(args, "cache_dir") or os.environ.get("CHANNEL_CACHE_DIR")
    return Path(explicit) if explicit else default_cache_dir()


def pick_backend(args: argparse.Namespace):
    """The backend for --backend; a fallback from `auto` is said once, on stderr."""
    from .backends.select import backend_for_model

    choice = backend_for_model(_opt(args, "backend", "auto"), _opt(args, "model"),
                               cache_dir(args))
    if choice.note:
        print(f"channel: note: {choice.note}", file=sys.stderr)
    return choice


def backend_and_model(args: argparse.Namespace):
    """The backend for --backend and the model loaded for it. `auto` moves to the CPU when
    the model's architecture is one the GPU backend does not implement."""
    from .backends.select import fit_to_model

    choice = pick_backend(args)
    model = load_model_with_progress(args, choice.backend)
    fitted = fit_to_model(choice, _opt(args, "backend", "auto"), model.config, cache_dir(args))
    if fitted is not choice:
        if fitted.note:
            print(f"channel: note: {fitted.note}", file=sys.stderr)
        if fitted.backend.needs_f32_weights and model.weights is None:
            model = load_model_with_progress(args, fitted.backend)
    return fitted.backend, model


def load_model_with_progress(args: argparse.Namespace, backend=None):
    from .model.model import load_model
    from .progress import ProgressBar

    bar = ProgressBar("building weight image (first run only)")
    f32 = backend is None or backend.needs_f32_weights
    try:
        return load_model(_opt(args, "model"), cache_dir(args), progress=bar.update,
                          f32_weights=f32)
    finally:
        bar.close()


def _chat(args: argparse.Namespace) -> int:
    from .session.session import Session
    from .state.sampler import SamplingSettings

    settings = SamplingSettings(args.temperature, args.top_k, args.top_p, args.seed)
    if args.max_tokens < 1:
        raise ValueError(f"--max-tokens must be at least 1, got {args.max_tokens}")
    problem = message_problem(args.message, Limits())
    if problem:
        raise ValueError(f"the message {problem}")
    from .paths import check_session_name

    name = check_session_name(_opt(args, "session", "default"))
    _session_model(args, name)
    backend, model = backend_and_model(args)
    session = Session(model, data_dir(args), name, backend=backend)
    boot = session.boot(cold=bool(_opt(args, "cold", False)))
    _remember_model(args, name, model)
    for warning in boot.warnings:
        print(f"channel: warning: {warning}", file=sys.stderr)
    if not args.json:
        print(boot_line(boot), file=sys.stderr)
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


def boot_line(boot) -> str:
    """One line a person reads at startup: which boot, why, and what each phase cost."""
    if boot.kind == "warm":
        return (f"Warm boot · restored {boot.restored_slots:,} slots in {boot.restore_ms:.0f} ms"
                f" · replayed {boot.replayed_events} events in {boot.replay_ms:.0f} ms")
    return (f"Cold boot ({boot.reason}) · replayed {boot.replayed_events} events, "
            f"{boot.replayed_tokens:,} tokens in {boot.replay_ms:.0f} ms")


def _print_piece(piece: str) -> None:
    sys.stdout.write(piece)
    sys.stdout.flush()


def _models(args: argparse.Namespace) -> int:
    from .model.catalog import scan
    from .model.catalog_table import render_table

    entries = scan(model_roots())
    if args.json:
        for entry in entries:
            print(json.dumps(entry.to_json(), ensure_ascii=False))
    else:
        print(render_table(entries))
    return 0


def _perplexity(args: argparse.Namespace) -> int:
    from .tools.perplexity import perplexity

    text = args.text.read_text(encoding="utf-8")
    backend, model = backend_and_model(args)
    result = perplexity(model, text, args.ring_slots, backend)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['tokens']} tokens, perplexity {result['perplexity']:.3f} "
              f"(ring {result['ring_slots']} slots, {result['evicted']} evicted, "
              f"{result['rebases']} rebases, {result['backend']})")
    return 0


def _send(args: argparse.Namespace) -> int:
    """Append a user event; a running engine with the session open answers it."""
    import time

    from .paths import check_session_name
    from .session.stream import StreamLog

    problem = message_problem(args.text, Limits())  # what the engine would take in a turn
    if problem:
        raise ValueError(f"the message {problem}")
    name = check_session_name(_opt(args, "session", "default"))
    log = StreamLog(data_dir(args) / f"{name}.stream.jsonl")
    start = log.read()
    sent = log.append("user", args.text)
    if args.no_wait:
        print(sent.id)
        return 0
    offset, deadline = start.end_offset, time.monotonic() + args.timeout
    seen_ours = False
    while time.monotonic() < deadline:
        read = log.read(offset)
        offset = read.end_offset
        for event in read.events:
            seen_ours = seen_ours or event.id == sent.id
            if seen_ours and event.role == "assistant":
                print(event.content)
                return 0
        time.sleep(0.2)
    print(f"channel: sent {sent.id}; no engine answered within {args.timeout:g} s (the "
          f"message is kept and answered when session {name!r} is next opened)",
          file=sys.stderr)
    return 3


def _snapshot_inspect(args: argparse.Namespace) -> int:
    from .snapshot.inspect import inspect_snapshot, render_inspection

    model = load_model_with_progress(args) if _opt(args, "model") else None
    report = inspect_snapshot(args.path, model)
    print(json.dumps(report) if args.json else render_inspection(report))
    return 0 if report["valid"] else 1


def _fork(args: argparse.Namespace) -> int:
    """Works beside a running engine: a fork copies the last snapshot and the whole stream,
    and the new session replays whatever the snapshot does not hold yet."""
    from .session.fork import fork_session

    report = fork_session(data_dir(args), args.source, args.new)
    state = (f"snapshot {report.snapshot_bytes:,} bytes" if report.snapshot_bytes
             else "no snapshot: it boots cold")
    print(f"forked {report.source!r} as {report.name!r}: {report.events} events, {state}")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from .tools.doctor import diagnose, render

    report = diagnose(_opt(args, "model"), data_dir(args), cache_dir(args))
    print(json.dumps(report) if args.json else render(report))
    return 0


def _bench(args: argparse.Namespace) -> int:
    from .tools.bench import run_benchmarks

    result = run_benchmarks(_opt(args, "model"), cache_dir(args), quick=args.quick,
                            scratch_dir=data_dir(args), backend=pick_backend(args).backend)
    print(json.dumps(result))
    return 0


def _run_app(args: argparse.Namespace) -> int:
    """`channel` with no subcommand: the Textual app, which spawns the engine as a child."""
    from channel_tui.app import run_app
    from channel_tui.options import AppOptions

    explicit_cache = _opt(args, "cache_dir") or os.environ.get("CHANNEL_CACHE_DIR")
    return run_app(AppOptions(
        data_dir=data_dir(args), session=_opt(args, "session", "default"),
        model=_opt(args, "model"), backend=_opt(args, "backend"),
        cold=bool(_opt(args, "cold", False)),
        cache_dir=Path(explicit_cache) if explicit_cache else None,
    ))


if __name__ == "__main__":
    sys.exit(main())
