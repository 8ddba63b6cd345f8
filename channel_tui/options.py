"""What the app was asked to do: the `channel` command line, as one dataclass."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

APP_NAME = "channel"
# The engine's rule for session names (docs/protocol.md), duplicated so we import nothing heavy.
SESSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def default_data_dir() -> Path:
    """The platform's user-data directory; the engine uses the same default."""
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def valid_session_name(name: str) -> bool:
    return bool(SESSION_NAME.fullmatch(name))


def data_dir_problem(path: Path) -> str | None:
    """Why `path` cannot hold sessions (None when it can); creates it, private, if missing.

    Checked before the engine starts so that a bad directory is one readable sentence in
    the app rather than an engine that never answers.
    """
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except FileExistsError:
        return f"The data directory {path} is not a directory"
    except OSError as exc:
        return f"The data directory {path} cannot be created: {exc.strerror or exc}"
    if not path.is_dir():
        return f"The data directory {path} is not a directory"
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        return f"The data directory {path} is not readable and writable by you"
    return None


@dataclass
class AppOptions:
    data_dir: Path | None = None
    session: str = "default"
    model: Path | None = None
    backend: str | None = None
    cold: bool = False  # ignore the snapshot for the first boot only; restarts boot warm
    cache_dir: Path | None = None
    debounce_s: float | None = None
    # The engine command line without its options; tests swap in a fake engine for SVGs.
    engine_command: list[str] = field(
        default_factory=lambda: [sys.executable, "-m", "engine"])
    export_dir: Path | None = None  # where Ctrl+E writes Markdown; default: the cwd
    max_tokens: int = 512
    # Extra `turn` fields (temperature, top_k, top_p, seed); empty: the engine's greedy default.
    sampling: dict[str, float | int] = field(default_factory=dict)
    max_restarts: int = 3  # crashes within RESTART_WINDOW_S before we stop restarting

    def engine_argv(self) -> list[str]:
        argv = list(self.engine_command)
        if self.data_dir is not None:
            argv += ["--data-dir", str(self.data_dir)]
        if self.cache_dir is not None:
            argv += ["--cache-dir", str(self.cache_dir)]
        if self.model is not None:
            argv += ["--model", str(self.model)]
        if self.backend is not None:
            argv += ["--backend", self.backend]
        if self.debounce_s is not None:
            argv += ["--debounce-s", str(self.debounce_s)]
        return argv

    def resolved_data_dir(self) -> Path:
        return self.data_dir if self.data_dir is not None else default_data_dir()
