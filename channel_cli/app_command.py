"""`channel` with no command: the Textual app, with the options the command line gave it."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from channel_cli.cli_args import data_dir, opt, sampling_overrides


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
    return AppOptions(
        # No --session: the app returns to the last session used (channel_tui/preferences.py).
        data_dir=data_dir(args), session=opt(args, "session"),
        config_dir=opt(args, "config_dir"),
        model=opt(args, "model"), backend=opt(args, "backend"),
        cold=bool(opt(args, "cold", False)),
        cache_dir=Path(explicit_cache) if explicit_cache else None,
        max_tokens=max_tokens, sampling=sampling_overrides(args),
        ring_slots=opt(args, "ring_slots"), evict=opt(args, "evict"),
    )
