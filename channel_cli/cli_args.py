"""The command line's shared options: where data and caches live, which model (a path or a
name `channel models` lists) and which backend, resolved the same way for every command."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from engine.paths import default_cache_dir, default_data_dir

# `channel chat`'s sampling options: (flag, the request field it sets, help). Each defaults to
# None, "the model's default" (engine/state/sampling_defaults.py).
SAMPLING_OPTIONS = (
    ("--temperature", "temperature", "0 is greedy"),
    ("--top-k", "top_k", "0 disables"),
    ("--top-p", "top_p", "1 disables"),
    ("--min-p", "min_p", "0 disables"),
    ("--typical-p", "typical_p", "1 disables"),
    ("--repeat-penalty", "repeat_penalty", "1 disables"),
    ("--repeat-last-n", "repeat_last_n", "tokens the penalties look back over; -1: the reply"),
    ("--presence-penalty", "presence_penalty", "0 disables"),
    ("--frequency-penalty", "frequency_penalty", "0 disables"),
    ("--dry-multiplier", "dry_multiplier", "0 disables DRY"),
    ("--dry-base", "dry_base", "DRY's growth per repeated token"),
    ("--dry-allowed-length", "dry_allowed_length", "repeats DRY lets through"),
    ("--dry-penalty-last-n", "dry_penalty_last_n", "tokens DRY looks back over; -1: the reply"),
    ("--xtc-probability", "xtc_probability", "0 disables XTC"),
    ("--xtc-threshold", "xtc_threshold", "XTC's probability threshold"),
    ("--seed", "seed", "default: drawn from the session's generator"),
)


def add_sampling_options(parser: argparse.ArgumentParser, default=None) -> None:
    """The sampling flags; `default` (argparse.SUPPRESS on the top-level parser, so that a
    subcommand's own defaults are not overwritten) is what an absent flag leaves."""
    from engine.state.sampling import REQUEST_FIELDS

    for flag, name, note in SAMPLING_OPTIONS:
        parser.add_argument(flag, dest=name, type=REQUEST_FIELDS[name], default=default,
                            help=f"{note} (default: the model's)" if name != "seed" else note)


def sampling_overrides(args: argparse.Namespace) -> dict[str, float | int]:
    """The sampling options given, checked (ValueError naming the first bad one)."""
    from engine.state.sampling import checked_overrides

    given = {name: getattr(args, name) for _, name, _ in SAMPLING_OPTIONS
             if getattr(args, name, None) is not None}
    try:
        return checked_overrides(given)
    except ValueError as exc:
        flag = next((f for f, name, _ in SAMPLING_OPTIONS if str(exc).startswith(name)), None)
        raise ValueError(f"{flag}: {exc}" if flag else str(exc)) from None


def opt(args: argparse.Namespace, name: str, default=None):
    return getattr(args, name, default)


def model_roots():
    """Where `channel models` and --model NAME look: this user's home and environment."""
    from engine.model.catalog_sources import default_roots

    return default_roots(os.environ, Path.home())


def resolve_model_option(args: argparse.Namespace) -> None:
    """--model as a path from here on: a listed name is looked up in the catalog."""
    text = opt(args, "model")
    if text is None or isinstance(text, Path):
        return
    from engine.model.catalog import resolve_model

    args.model = resolve_model(str(text), model_roots())


def use_session_model(args: argparse.Namespace, name: str) -> None:
    """A session runs on the model it was made with (docs/models.md): set args.model to the
    recorded one, saying so when --model asked for another."""
    from engine.session.model_record import session_model

    record = session_model(data_dir(args), name)
    if record is None:
        return
    note = other_model_note(name, record, opt(args, "model"))
    if note:
        print(f"channel: note: {note}", file=sys.stderr)
    args.model = Path(record.path)


def other_model_note(name: str, record, asked: Path | str | None) -> str | None:
    """What to say when --model asks for another model than the one session `name` was
    made with (its ModelRecord, or None for a new session): it keeps its own."""
    from engine.session.model_record import same_file

    if record is None or asked is None or same_file(asked, record.path):
        return None
    return (f"session {name!r} runs on model {record.name!r} ({record.path}); --model "
            f"applies to new sessions")


def remember_model(args: argparse.Namespace, name: str, model) -> None:
    from engine.session.model_record import read_record, write_record

    if read_record(data_dir(args), name) is None:
        write_record(data_dir(args), name, model.path, model.fingerprint, model.name)


def data_dir(args: argparse.Namespace) -> Path:
    explicit = opt(args, "data_dir") or os.environ.get("CHANNEL_DATA_DIR")
    return Path(explicit) if explicit else default_data_dir()


def session_data_dir(args: argparse.Namespace) -> Path:
    """The data directory, for a command that writes sessions: created private if missing,
    closed to others if they could read it (said once, on stderr), refused in one line when
    sessions cannot live there, as the engine process does (docs/security.md)."""
    from engine.errors import ChannelError
    from engine.process.protocol import data_dir_problem

    path = data_dir(args)
    problem, note = data_dir_problem(path, make_private=True)
    if problem:
        raise ChannelError(problem)
    if note:
        print(f"channel: note: {note}", file=sys.stderr)
    return path


def cache_dir(args: argparse.Namespace) -> Path:
    explicit = opt(args, "cache_dir") or os.environ.get("CHANNEL_CACHE_DIR")
    return Path(explicit) if explicit else default_cache_dir()


def pick_backend(args: argparse.Namespace):
    """The backend for --backend; a fallback from `auto` is said once, on stderr."""
    from engine.backends.select import backend_for_model

    choice = backend_for_model(opt(args, "backend", "auto"), opt(args, "model"),
                               cache_dir(args))
    if choice.note:
        print(f"channel: note: {choice.note}", file=sys.stderr)
    return choice


def backend_and_model(args: argparse.Namespace):
    """The backend for --backend and the model loaded for it. `auto` moves to the CPU when
    the model's architecture is one the GPU backend does not implement."""
    from engine.backends.select import fit_to_model
    from engine.model.model import checked_model_path

    checked_model_path(opt(args, "model"))  # a bad file: its one-line error, nothing else
    choice = pick_backend(args)
    model = load_model_with_progress(args, choice.backend)
    fitted = fit_to_model(choice, opt(args, "backend", "auto"), model.config, cache_dir(args))
    if fitted is not choice:
        if fitted.note:
            print(f"channel: note: {fitted.note}", file=sys.stderr)
        if fitted.backend.needs_f32_weights and model.weights is None:
            model = load_model_with_progress(args, fitted.backend)
    return fitted.backend, model


def load_model_with_progress(args: argparse.Namespace, backend=None):
    from engine.model.model import load_model
    from engine.progress import ProgressBar

    bar = ProgressBar("building weight image (first run only)")
    f32 = backend is None or backend.needs_f32_weights
    try:
        return load_model(opt(args, "model"), cache_dir(args), progress=bar.update,
                          f32_weights=f32)
    finally:
        bar.close()
