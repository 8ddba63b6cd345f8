"""What a screen may use of the engine: a link the app injects, as frogmouth does.

The app owns the engine process and replaces its client when it restarts one; screens hold
this link instead of reaching into the app (`self.app.engine`, `.options`, `.hello`). It sends
requests, says whether the engine is ready, keeps the engine's `hello`, and carries the
options a screen needs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .engine import EngineClient
from .options import AppOptions


class EngineLink:
    def __init__(self, options: AppOptions) -> None:
        self.options = options
        self.client: EngineClient | None = None  # the current engine process's client
        self.hello: dict = {}  # the engine's `ready` (or latest `hello`) event
        self._cold_next = options.cold  # --cold applies to the first boot only

    @property
    def ready(self) -> bool:
        return self.client is not None and self.client.ready and self.client.running

    def send(self, kind: str, on_event: Callable[[dict], None] | None = None,
             **fields: object) -> int | None:
        """Write one request; its id, or None when no engine is running."""
        if self.client is None:
            return None
        return self.client.send(kind, on_event, **fields)

    def forget(self, request_id: int | None) -> None:
        if self.client is not None:
            self.client.forget(request_id)

    def take_cold(self) -> bool:
        cold, self._cold_next = self._cold_next, False
        return cold

    def data_dir(self) -> Path:
        """The engine's data directory once it said hello, else the one we asked for."""
        given = self.hello.get("data_dir")
        return Path(given) if given else self.options.resolved_data_dir()

    @property
    def model(self) -> str | None:
        return self.hello.get("model")
