"""Where GGUF files live on this machine: the places `channel models` looks, and how.

The bundled model, the Hugging Face hub cache, LM Studio's and GPT4All's model folders,
Ollama's blob store (named through its manifests), ~/models and each folder in
CHANNEL_MODELS. `Roots` holds the home directory and the environment, taken once by the
command line, so nothing here reads os.environ and tests can point it at a temporary HOME.
Every walk is bounded in depth and in files, skips what it cannot read, and never follows a
directory link out of a tree (a file link, as the hub cache's snapshots use, is followed).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

MAX_DEPTH = 4  # folders below a root that a walk enters
MAX_FILES_PER_ROOT = 10_000  # directory entries a walk looks at per root
MAX_MANIFEST_BYTES = 1 << 20
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_REGISTRY = "registry.ollama.ai"
DIGEST = re.compile(r"sha256:([0-9a-f]{64})")

# Sources, in the order a file reached by two routes is attributed to.
BUNDLED, OLLAMA, HF, LMSTUDIO, GPT4ALL, FOLDER = (
    "bundled", "ollama", "hf", "lmstudio", "gpt4all", "folder")


@dataclass(frozen=True)
class Found:
    """A candidate GGUF: where it was found, and an Ollama name if it came with one."""

    source: str
    path: Path
    alias: str | None = None


@dataclass(frozen=True)
class Roots:
    """The home directory, the environment and the bundled model: where to look."""

    home: Path
    env: Mapping[str, str] = field(default_factory=dict)
    bundled: Path | None = None

    def _env_path(self, name: str) -> Path | None:
        value = self.env.get(name)
        return Path(value).expanduser() if value else None

    def hf_hub(self) -> Path:
        """huggingface_hub's rule: HF_HUB_CACHE, else $HF_HOME/hub, else
        $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub."""
        explicit = self._env_path("HF_HUB_CACHE") or self._env_path("HUGGINGFACE_HUB_CACHE")
        if explicit:
            return explicit
        hf_home = self._env_path("HF_HOME")
        if hf_home:
            return hf_home / "hub"
        cache = self._env_path("XDG_CACHE_HOME") or self.home / ".cache"
        return cache / "huggingface" / "hub"

    def lmstudio(self) -> list[Path]:
        return [self.home / ".lmstudio" / "models", self.home / ".cache" / "lm-studio" / "models"]

    def gpt4all(self) -> list[Path]:
        data = self._env_path("XDG_DATA_HOME") or self.home / ".local" / "share"
        return [data / "nomic.ai" / "GPT4All",
                self.home / "Library" / "Application Support" / "nomic.ai" / "GPT4All"]

    def ollama(self) -> Path:
        return self._env_path("OLLAMA_MODELS") or self.home / ".ollama" / "models"

    def folders(self) -> list[Path]:
        """~/models, then each folder in CHANNEL_MODELS (os.pathsep-separated)."""
        extra = [Path(p).expanduser() for p in self.env.get("CHANNEL_MODELS", "").split(
            os.pathsep) if p]
        return [self.home / "models", *extra]


def default_roots(environ: Mapping[str, str], home: Path) -> Roots:
    """Roots for this user: called once, by the command line and the engine's main, with
    os.environ and Path.home(). The bundled model is left out when it is not installed."""
    from ..errors import ModelNotFoundError  # noqa: PLC0415
    from ..paths import default_model_path  # noqa: PLC0415

    try:
        bundled = default_model_path()
    except ModelNotFoundError:
        bundled = None
    return Roots(home, dict(environ), bundled)


def find_ggufs(roots: Roots) -> Iterator[Found]:
    """Every candidate GGUF under `roots`, in source order; a file may come more than once
    (the catalog keeps the first route to each real file)."""
    if roots.bundled is not None:
        yield Found(BUNDLED, roots.bundled)
    yield from ollama_models(roots.ollama())
    hub = roots.hf_hub()
    for repo in _children(hub):
        if repo.name.startswith("models--"):
            yield from (Found(HF, p) for p in walk_ggufs(repo / "snapshots"))
    for root in roots.lmstudio():
        yield from (Found(LMSTUDIO, p) for p in walk_ggufs(root))
    for root in roots.gpt4all():
        yield from (Found(GPT4ALL, p) for p in walk_ggufs(root, max_depth=0))
    for root in roots.folders():
        yield from (Found(FOLDER, p) for p in walk_ggufs(root))


def walk_ggufs(root: Path, max_depth: int = MAX_DEPTH) -> Iterator[Path]:
    """Files named *.gguf under `root`, at most `max_depth` folders down, sorted. Folder
    links are not entered (no loops, no escaping the tree); file links are yielded."""
    budget = [MAX_FILES_PER_ROOT]

    def walk(folder: Path, depth: int) -> Iterator[Path]:
        entries = []
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    budget[0] -= 1
                    if budget[0] < 0:
                        break
                    entries.append(entry)
        except OSError:
            return
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth < max_depth:
                        yield from walk(Path(entry.path), depth + 1)
                elif entry.name.lower().endswith(".gguf"):
                    yield Path(entry.path)
            except OSError:
                continue

    if root.is_dir():
        yield from walk(root, 0)


def ollama_models(models: Path) -> Iterator[Found]:
    """Ollama's models, named from manifests/<host>/<namespace>/<model>/<tag>: the manifest's
    model layer names a blob, blobs/sha256-<hex>. Names are `model:tag` for the default
    registry's `library` namespace, `namespace/model:tag` for others on it, and
    `host/namespace/model:tag` elsewhere, as `ollama list` shows them."""
    manifests = models / "manifests"
    for host in _children(manifests):
        for namespace in _children(host):
            for model in _children(namespace):
                for tag in _children(model, files=True):
                    blob = _ollama_blob(tag, models / "blobs")
                    if blob is not None:
                        yield Found(OLLAMA, blob, ollama_name(host.name, namespace.name,
                                                              model.name, tag.name))


def ollama_name(host: str, namespace: str, model: str, tag: str) -> str:
    if host == OLLAMA_REGISTRY:
        prefix = "" if namespace == "library" else f"{namespace}/"
    else:
        prefix = f"{host}/{namespace}/"
    return f"{prefix}{model}:{tag}"


def _ollama_blob(manifest: Path, blobs: Path) -> Path | None:
    """The model blob a manifest names, or None for a manifest we cannot use."""
    try:
        with open(manifest, "rb") as f:
            record = json.loads(f.read(MAX_MANIFEST_BYTES + 1)[:MAX_MANIFEST_BYTES])
    except (OSError, ValueError):
        return None
    layers = record.get("layers") if isinstance(record, dict) else None
    for layer in layers if isinstance(layers, list) else []:
        if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL_LAYER:
            match = DIGEST.fullmatch(str(layer.get("digest", "")))
            if match:  # a digest of any other shape could name a path outside blobs/
                return blobs / f"sha256-{match.group(1)}"
    return None


def _children(folder: Path, files: bool = False) -> list[Path]:
    """Sub-folders (or regular files) of `folder`, sorted; none if it cannot be read."""
    out = []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                if len(out) >= MAX_FILES_PER_ROOT:
                    break
                if entry.name.startswith("."):
                    continue
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                except OSError:
                    continue
                if (stat.S_ISREG(mode) if files else stat.S_ISDIR(mode)):
                    out.append(Path(entry.path))
    except OSError:
        return []
    return sorted(out)
