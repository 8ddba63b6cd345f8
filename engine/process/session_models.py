"""The models an engine process has loaded, and which one each of its sessions runs on.

One engine serves sessions made on different models: a session opens on its recorded model
(engine/session/model_record.py), on the model an `open` request names, or on the engine's
default (its --model). Models are loaded once, keyed by their file's real path, and shared by
every session on them (weights, tokenizer, template; each session has its own ring). A model
no open session uses is let go when another is loaded, so the process holds the default plus
what is in use.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from ..errors import ChannelError
from ..model.catalog import scan
from ..model.catalog_sources import Roots
from ..model.model import Model
from ..session.model_record import (
    SessionModelError,
    read_record,
    same_file,
    session_model,
    write_record,
)

log = logging.getLogger("channel.engine")
ModelLoader = Callable[[Path], Model]


def _key(path: str | Path) -> str:
    return os.path.realpath(path)


class SessionModels:
    def __init__(self, default: Model, data_dir: Path, load: ModelLoader | None = None,
                 roots: Roots | None = None):
        self.default = default
        self.data_dir = Path(data_dir)
        self._load = load
        self.roots = roots
        self.loaded: dict[str, Model] = {_key(default.path): default}
        self.in_use: dict[str, str] = {}  # session name -> key of its model

    def for_session(self, session: str, requested: Path | None = None) -> Model:
        """The model `session` must open on (loading it if need be). Raises
        SessionModelError when its recorded model is gone or changed, or another is asked."""
        record = session_model(self.data_dir, session, requested)
        if record is not None:
            return self._model_at(Path(record.path), record.fingerprint)
        if requested is not None:
            return self._model_at(requested)
        return self.default

    def remember(self, session: str, model: Model) -> str | None:
        """Note that `session` is open on `model`, recording it if the session has no record
        yet. Returns a warning line if the record could not be written."""
        self.in_use[session] = _key(model.path)
        try:
            if read_record(self.data_dir, session) is None:
                write_record(self.data_dir, session, model.path, model.fingerprint, model.name)
        except (OSError, ChannelError) as exc:
            return f"session {session!r}: its model could not be recorded ({exc})"
        return None

    def release(self, session: str) -> None:
        self.in_use.pop(session, None)

    def check_same(self, session: str, model: Model, requested: str | None) -> None:
        """An `open` of an already open session may not ask for another model."""
        if requested and not same_file(requested, model.path):
            raise SessionModelError(f"session {session!r} is open on model {model.name!r} "
                                    f"({model.path}); open a new session to use {requested}")

    @staticmethod
    def fields(model: Model) -> dict:
        """What a `booted` event says about the session's model."""
        return {"model": model.name, "model_path": str(model.path),
                "fingerprint": model.fingerprint}

    def catalog(self) -> list[dict]:
        """The `models` event's list: every GGUF the catalog finds (docs/models.md)."""
        return [entry.to_json() for entry in scan(self.roots)] if self.roots else []

    def _model_at(self, path: Path, fingerprint: str | None = None) -> Model:
        key = _key(path)
        model = self.loaded.get(key)
        if model is not None and (fingerprint is None or model.fingerprint == fingerprint):
            return model
        if self._load is None:
            raise SessionModelError(f"this engine cannot load another model: {path}")
        self._let_go_unused()
        log.info("loading model %s", path)
        model = self._load(path)
        if fingerprint is not None and model.fingerprint != fingerprint:
            raise SessionModelError(f"model file changed while loading: {path}")
        self.loaded[key] = model
        return model

    def _let_go_unused(self) -> None:
        keep = {_key(self.default.path), *self.in_use.values()}
        for key in [k for k in self.loaded if k not in keep]:
            log.info("letting go of model %s (no open session uses it)", key)
            del self.loaded[key]
