"""The engine process's command line, defined once.

`python -m engine` parses these flags (engine/__main__.py), `channel` offers the ones a person
gives it with the same names and words (channel_cli/cli.py), and the TUI writes them when it
spawns the engine (`engine_argv`). A client needs only the options' names, so this module
imports nothing at load time; their types, defaults and choices are looked up when a parser
is built.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

# Keyed by the attribute argparse gives each flag (and engine_argv's keyword).
ENGINE_FLAGS: dict[str, str] = {
    "data_dir": "--data-dir",
    "cache_dir": "--cache-dir",
    "model": "--model",
    "backend": "--backend",
    "debounce_s": "--debounce-s",
    "ring_slots": "--ring-slots",
    "evict": "--evict",
    "max_message_bytes": "--max-message-bytes",
    "keep_turns": "--keep-turns",
    "compact_share": "--compact-share",
}


def _specs() -> dict[str, dict[str, Any]]:
    """add_argument's keywords for each flag, its default being the engine's."""
    from ..backends import BACKEND_CHOICES  # noqa: PLC0415 - parsers only, not clients
    from ..snapshot.archive import KEEP_LINKS  # noqa: PLC0415
    from ..snapshot.segment import COMPACT_SHARE  # noqa: PLC0415
    from ..state.ring_policy import DEFAULT_EVICT, EVICT_POLICIES  # noqa: PLC0415
    from .protocol import DEFAULT_MAX_MESSAGE_BYTES  # noqa: PLC0415

    return {
        "data_dir": {"type": Path, "default": None, "help": "where sessions live"},
        "cache_dir": {"type": Path, "default": None, "help": "where weight images are cached"},
        "model": {"default": None,
                  "help": "a GGUF file (`channel` also takes a name `channel models` lists)"},
        "backend": {"choices": BACKEND_CHOICES, "default": "auto",
                    "help": "auto: Vulkan on a GPU, else ggml (quantized CPU), else numpy"},
        "debounce_s": {"type": float, "default": 5.0,
                       "help": "quiescence before autosave (seconds)"},
        "ring_slots": {"type": int, "default": None,
                       "help": "ring size in slots (small: evicts sooner)"},
        "evict": {"choices": EVICT_POLICIES, "default": DEFAULT_EVICT,
                  "help": "what a full ring forgets (docs/memory.md)"},
        "max_message_bytes": {"type": int, "default": DEFAULT_MAX_MESSAGE_BYTES,
                              "help": "refuse a message larger than this (UTF-8 bytes)"},
        "keep_turns": {"type": int, "default": KEEP_LINKS,
                       "help": "recent turns a session keeps restorable warm, about one "
                               "saved state each, within 2 GiB (docs/snapshot.md)"},
        "compact_share": {"type": float, "default": COMPACT_SHARE,
                          "help": "save a complete snapshot once the segments since the last "
                                  "one pass this share of its size"},
    }


def add_engine_flags(parser: argparse.ArgumentParser, *names: str,
                     default: Any = None) -> None:
    """Add the named flags (all of them when none is named) to `parser`. `default`, when
    given (argparse.SUPPRESS, say), replaces every flag's own default."""
    specs = _specs()
    for name in names or ENGINE_FLAGS:
        spec = specs[name] if default is None else {**specs[name], "default": default}
        parser.add_argument(ENGINE_FLAGS[name], dest=name, **spec)


def engine_argv(**values: Any) -> list[str]:
    """The flags for `values` (ENGINE_FLAGS' keys), leaving out those that are None."""
    argv: list[str] = []
    for name, value in values.items():
        if value is not None:
            argv += [ENGINE_FLAGS[name], str(value)]
    return argv
