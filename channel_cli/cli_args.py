"""The command line's shared options: where data and caches live, which model (a path or a
name `channel models` lists) and which backend, resolved the same way for every command."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from engine.paths import default_cache_dir, default_data_dir


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
    from engine.session.model_record import same_file, session_model

    record = session_model(data_dir(args), name)
    if record is None:
        return
    asked = opt(args, "model")
    if asked is not None and not same_file(asked, record.path):
        print(f"channel: note: session {name!r} runs on model {record.name!r} "
              f"({record.path}); --model applies to new sessions", file=sys.stderr)
    args.model = Path(record.path)


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
