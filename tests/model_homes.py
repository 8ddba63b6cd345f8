"""A fake HOME holding GGUFs where each tool keeps them, for the model catalog's tests.

Every model is a real tiny GGUF (tiny_model.py) or a real GGUF of an architecture Channel does
not run; the layouts are those of the Hugging Face hub cache (snapshot links into blobs), LM
Studio, GPT4All, Ollama (manifests naming blobs), ~/models and a CHANNEL_MODELS folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

from engine.model.catalog_sources import Roots

from .tiny_model import TinySpec, write_tiny_gguf

OLLAMA_LAYER = "application/vnd.ollama.image.model"


@dataclass
class FakeHome:
    home: Path
    bundled: Path
    env: dict[str, str]
    paths: dict[str, Path] = field(default_factory=dict)  # role -> the file as listed
    specs: dict[str, TinySpec] = field(default_factory=dict)

    def roots(self) -> Roots:
        return Roots(self.home, self.env, self.bundled)

    def process_env(self) -> dict[str, str]:
        """os.environ for a child process that should see only this home."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("HF_", "HUGGINGFACE_", "XDG_", "OLLAMA_", "CHANNEL_"))}
        env.update(self.env, HOME=str(self.home))
        return env


def write_other_architecture(path: Path) -> Path:
    """A well-formed GGUF of an architecture Channel refuses (gemma2), with the naming
    metadata llama.cpp's converter writes."""
    w = gguf.GGUFWriter(str(path), "gemma2")
    w.add_name("Gemma 2 2b It")
    w.add_basename("gemma-2")
    w.add_size_label("2B")
    w.add_finetune("it")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_block_count(1)
    w.add_context_length(8192)
    w.add_token_list([f"t{i}" for i in range(300)])  # long enough to be stepped over
    w.add_tensor("token_embd.weight", np.zeros((300, 8), np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(8, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _blob(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _ollama_manifest(models: Path, namespace: str, model: str, tag: str, digest: str) -> None:
    manifest = models / "manifests" / "registry.ollama.ai" / namespace / model / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64},
        {"mediaType": OLLAMA_LAYER, "digest": f"sha256:{digest}", "size": 1}]}))


def make_fake_home(base: Path) -> FakeHome:
    home = base / "home"
    home.mkdir(parents=True)
    extra = base / "extra-models"
    fake = FakeHome(home, base / "bundled" / "tiny-bundled.gguf",
                    {"CHANNEL_MODELS": os.pathsep.join([str(extra), str(base / "missing")])})

    def tiny(role: str, path: Path, qtype: QT, seed: int) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        spec = TinySpec(tensor_type=qtype, seed=seed)
        write_tiny_gguf(path, spec)
        fake.paths[role], fake.specs[role] = path, spec
        return path

    tiny("bundled", fake.bundled, QT.F32, 0)
    # Hugging Face: snapshots/<rev>/<file> is a relative link into blobs/<sha256>.
    repo = home / ".cache" / "huggingface" / "hub" / "models--someone--tiny-GGUF"
    staged = tiny("hf", base / "staging" / "tiny-f16.gguf", QT.F16, 1)
    digest = _blob(staged)
    (repo / "blobs").mkdir(parents=True)
    staged.rename(repo / "blobs" / digest)
    snapshot = repo / "snapshots" / "0123abcd" / "tiny-f16.gguf"
    snapshot.parent.mkdir(parents=True)
    snapshot.symlink_to(Path("..") / ".." / "blobs" / digest)
    fake.paths["hf"] = snapshot
    tiny("lmstudio", home / ".lmstudio" / "models" / "pub" / "tiny-GGUF" / "tiny-q8_0.gguf",
         QT.Q8_0, 2)
    tiny("gpt4all", home / ".local" / "share" / "nomic.ai" / "GPT4All" / "tiny-q4_0.gguf",
         QT.Q4_0, 3)
    # Ollama: two tags of one model and another namespace, all naming one blob.
    models = home / ".ollama" / "models"
    staged = tiny("ollama", base / "staging" / "tiny-q4_1.gguf", QT.Q4_1, 4)
    digest = _blob(staged)
    (models / "blobs").mkdir(parents=True)
    blob = models / "blobs" / f"sha256-{digest}"
    staged.rename(blob)
    fake.paths["ollama"] = blob
    _ollama_manifest(models, "library", "tinyllama", "1b", digest)
    _ollama_manifest(models, "library", "tinyllama", "latest", digest)
    _ollama_manifest(models, "someone", "tiny", "q4", digest)
    _ollama_manifest(models, "library", "gone", "1b", "f" * 64)  # its blob is missing
    # ~/models: a link to the Ollama blob (listed once), an unsupported and a corrupt file.
    (home / "models" / "deep").mkdir(parents=True)
    (home / "models" / "ollama-link.gguf").symlink_to(blob)
    fake.paths["gemma"] = write_other_architecture(home / "models" / "deep" / "gemma.gguf")
    corrupt = home / "models" / "broken.gguf"
    corrupt.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + b"\xff" * 16)
    fake.paths["corrupt"] = corrupt
    tiny("channel_models", extra / "tiny-q5_1.gguf", QT.Q5_1, 5)
    return fake
