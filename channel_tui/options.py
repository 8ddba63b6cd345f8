"""What the app was asked to do: the `channel` command line, as one dataclass."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

# The one source of truth for what both sides share; it imports nothing heavy.
from engine.process.flags import engine_argv
from engine.process.protocol import SESSION_NAME, default_data_dir
from engine.process.protocol import data_dir_problem as engine_data_dir_problem


def valid_session_name(name: str) -> bool:
    return bool(SESSION_NAME.fullmatch(name))


def data_dir_problem(path: Path) -> str | None:
    """Why `path` cannot hold sessions (None when it can), as one sentence; creates it,
    private, if missing. The engine's own check (engine/process/protocol.py)."""
    problem, _ = engine_data_dir_problem(path)
    return f"The {problem}" if problem else None


@dataclass
class AppOptions:
    data_dir: Path | None = None
    # None: the session this data directory last had open (preferences.json), if it still
    # exists, else "default" (ChannelApp.start_session).
    session: str | None = None
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
    # Extra `turn` fields (temperature, top_p, seed, ...); empty: the model's defaults. A
    # session's own settings (F6) go over these.
    sampling: dict[str, float | int] = field(default_factory=dict)
    ring_slots: int | None = None  # the engine's --ring-slots (None: sized to the model)
    evict: str | None = None  # the engine's --evict (None: its default policy)
    max_restarts: int = 3  # crashes within RESTART_WINDOW_S before we stop restarting
    # What the command line has to say once the app is up (the session keeps its own model).
    notes: tuple[str, ...] = ()
    config_dir: Path | None = None  # where preferences.json lives; default: the platform's

    def engine_argv(self) -> list[str]:
        return [*self.engine_command, *engine_argv(
            data_dir=self.data_dir, cache_dir=self.cache_dir, model=self.model,
            backend=self.backend, debounce_s=self.debounce_s, ring_slots=self.ring_slots,
            evict=self.evict)]

    def resolved_data_dir(self) -> Path:
        return self.data_dir if self.data_dir is not None else default_data_dir()

    def resolved_config_dir(self) -> Path:
        from .preferences import default_config_dir

        return self.config_dir if self.config_dir is not None else default_config_dir()
