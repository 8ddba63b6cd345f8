"""Earlier generations of a snapshot chain, kept so that any recent turn restores warm.

A complete save replaces the base and starts a new chain. Before it does, the old base is
hard-linked into the chain directory and its segments moved beside it (no byte copied):

    NAME.snapshot.d/<anchor>-<digest8>.snapshot.bin   an earlier base
    NAME.snapshot.d/<anchor>-<digest8>.snapshot.d/    its segments, NNNNNN.seg

Each is a chain like the live one (chain.py restores it as it is), named by its base's
stream anchor, a ULID, so names sort oldest first. Generations are dropped oldest first
once the links they and the live chain hold pass `keep_links` (one link a save: about one a
turn) or their bytes pass `keep_bytes` (docs/snapshot.md, "Every turn restorable").

A crash part-way leaves nothing a restore misreads: before the new base lands, the archive
holds a second name of the old base; after it, segments not moved yet name the old base, so
the live chain stops at them (and sets them aside), and the archive simply has fewer links.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..fileio import describe_os_error
from .segment import chain_dir
from .writer import fsync_directory

KEEP_LINKS = 100  # the last 100 turns, about: a save a turn
KEEP_BYTES = 2 << 30  # or 2 GiB, whichever is smaller
ARCHIVED_BASE = re.compile(r"^[0-9A-Z]{26}-[0-9a-f]{8}\.snapshot\.bin$")
SEGMENT_FILE = re.compile(r"^\d{6}\.seg$")


@dataclass(frozen=True)
class Generation:
    base: Path  # its base; its segments are in chain_dir(base)
    links: int  # the base and its segments
    bytes: int


def generations(base: Path) -> list[Generation]:
    """The archived generations of `base`'s chain, newest first."""
    directory = chain_dir(base)
    try:
        names = sorted((e.name for e in os.scandir(directory)
                        if ARCHIVED_BASE.match(e.name) and e.is_file(follow_symlinks=False)),
                       reverse=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [_measure(directory / name) for name in names]


def _measure(base: Path) -> Generation:
    links, size = 1, base.stat().st_size
    with contextlib.suppress(OSError):
        for entry in os.scandir(chain_dir(base)):
            if SEGMENT_FILE.match(entry.name):
                links += 1
                size += entry.stat(follow_symlinks=False).st_size
    return Generation(base, links, size)


def archive_generation(base: Path, anchor: str, digest: bytes) -> Path | None:
    """Hard-link the current base into the chain directory, before a complete save
    replaces it; the archived name, or None where links are not possible (the live chain
    is then dropped as before)."""
    directory = chain_dir(base)
    target = directory / f"{anchor}-{digest.hex()[:8]}.snapshot.bin"
    if not ARCHIVED_BASE.match(target.name):
        return None  # a base without an anchor: nothing to continue it from
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
        os.link(base, target)
        fsync_directory(directory)
    except FileExistsError:
        return target
    except OSError:
        return None
    return target


def move_segments(base: Path, archived: Path) -> None:
    """After the new base landed: the old chain's segments go beside their archived base."""
    source, target = chain_dir(base), chain_dir(archived)
    names = sorted(e.name for e in os.scandir(source) if SEGMENT_FILE.match(e.name))
    target.mkdir(mode=0o700, exist_ok=True)
    for name in names:
        os.rename(source / name, target / name)
    fsync_directory(target)
    fsync_directory(source)


def prune(base: Path, live_links: int, keep_links: int = KEEP_LINKS,
          keep_bytes: int = KEEP_BYTES) -> str | None:
    """Drop the oldest generations past the budget; a one-line problem, or None."""
    links, size = live_links, 0
    try:
        for gen in generations(base):
            links += gen.links
            size += gen.bytes
            if links - gen.links >= keep_links or size > keep_bytes:
                shutil.rmtree(chain_dir(gen.base), ignore_errors=True)
                gen.base.unlink(missing_ok=True)
    except OSError as exc:
        return f"earlier snapshot generations could not be pruned: {describe_os_error(exc)}"
    return None
