"""`channel` with no command: the Textual app, with the options the command line gave it."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from channel_cli.cli_args import data_dir, opt, other_model_note, sampling_overrides


def run_app(args: argparse.Namespace) -> int:
    """`channel` with no subcommand: the Textual app, which spawns the engine as a child."""
    from channel_tui.app import run_app

    return run_app(app_options(args))


def app_options(args: argparse.Namespace):
    """The app's options from the command line (ValueError naming a bad one)."""
    from channel_tui.options import AppOptions
    from engine.state.sampling import MAX_REPLY_TOKENS

    max_tokens = opt(args, "max_tokens", 512)
    if not 0 < max_tokens <= MAX_REPLY_TOKENS:
        raise ValueError(f"--max-tokens must be from 1 to {MAX_REPLY_TOKENS}, got {max_tokens}")
    explicit_cache = opt(args, "cache_dir") or os.environ.get("CHANNEL_CACHE_DIR")
    note = _model_note(args, _session_to_open(args)) if opt(args, "model") else None
    return AppOptions(
        # No --session: the app returns to the last session used (channel_tui/preferences.py).
        data_dir=data_dir(args), session=opt(args, "session"),
        config_dir=opt(args, "config_dir"),
        model=opt(args, "model"), backend=opt(args, "backend"),
        cold=bool(opt(args, "cold", False)),
        cache_dir=Path(explicit_cache) if explicit_cache else None,
        max_tokens=max_tokens, sampling=sampling_overrides(args),
        ring_slots=opt(args, "ring_slots"), evict=opt(args, "evict"),
        notes=(note,) if note else (),
    )


def _session_to_open(args: argparse.Namespace) -> str:
    """The session the app will open (the last one used, without --session)."""
    from channel_tui.preferences import default_config_dir, load_preferences, session_to_open

    config = opt(args, "config_dir")
    prefs = load_preferences(Path(config) if config else default_config_dir())[0]
    return session_to_open(opt(args, "session"), data_dir(args), prefs)


def _model_note(args: argparse.Namespace, session: str) -> str | None:
    """`channel chat`'s note when --model names another model than the session's own. The
    session's record is only read here: a bad name or a damaged record is the engine's to
    report, in the app, when it opens the session."""
    from engine.errors import ChannelError
    from engine.paths import check_session_name
    from engine.session.model_record import read_record

    try:
        record = read_record(data_dir(args), check_session_name(session))
    except (ChannelError, ValueError, OSError):
        return None
    return other_model_note(session, record, opt(args, "model"))
