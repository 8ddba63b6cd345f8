"""The model catalog on a fake HOME: what it finds, what it says about each file, and
--model NAME, including `channel models --json` and `channel chat --model NAME` run as real
subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import pytest

from engine.model.catalog import ModelChoiceError, problem_of, resolve, resolve_model, scan
from engine.model.catalog_sources import Roots, find_ggufs
from engine.model.catalog_table import render_table
from engine.model.gguf_header import read_header
from engine.paths import default_model_path

from .model_homes import FakeHome, make_fake_home

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def fake(tmp_path_factory) -> FakeHome:
    return make_fake_home(tmp_path_factory.mktemp("catalog"))


def by_path(entries, path: Path):
    [entry] = [e for e in entries if e.path == str(path)]
    return entry


def test_every_source_is_found_once_with_its_fields(fake: FakeHome) -> None:
    entries = scan(fake.roots())
    sources = {role: by_path(entries, fake.paths[role]).source for role in (
        "bundled", "hf", "lmstudio", "gpt4all", "ollama", "channel_models", "gemma", "corrupt")}
    assert sources == {"bundled": "bundled", "hf": "hf", "lmstudio": "lmstudio",
                       "gpt4all": "gpt4all", "ollama": "ollama", "channel_models": "folder",
                       "gemma": "folder", "corrupt": "folder"}
    # The ~/models link to the Ollama blob is the same file: listed once, under Ollama.
    assert len({os.path.realpath(e.path) for e in entries}) == len(entries)
    assert not any(e.path.endswith("ollama-link.gguf") for e in entries)
    for role, spec in fake.specs.items():
        entry = by_path(entries, fake.paths[role])
        reader = gguf.GGUFReader(fake.paths[role])
        assert entry.supported and entry.status == "supported", (role, entry.problem)
        assert entry.architecture == "llama"
        assert entry.parameters == sum(int(t.n_elements) for t in reader.tensors)
        assert entry.quantization == spec.tensor_type.name
        assert entry.name == f"tiny-test-llama · {spec.tensor_type.name}"
        assert entry.context_length == spec.context_length
        assert entry.file_size == fake.paths[role].stat().st_size


def test_supported_models_come_first(fake: FakeHome) -> None:
    entries = scan(fake.roots())
    flags = [e.supported for e in entries]
    assert flags == sorted(flags, reverse=True) and flags.count(False) == 3


def test_ollama_names_and_a_missing_blob(fake: FakeHome) -> None:
    entries = scan(fake.roots())
    ollama = by_path(entries, fake.paths["ollama"])
    # Manifests are read in sorted order: the default registry's `library` names come first.
    assert ollama.aliases == ["tinyllama:1b", "tinyllama:latest", "someone/tiny:q4"]
    assert ollama.label == "tinyllama:1b"
    [gone] = [e for e in entries if "gone:1b" in e.aliases]
    assert not gone.supported and "file not found" in gone.problem


def test_unsupported_and_corrupt_files_say_why(fake: FakeHome) -> None:
    entries = scan(fake.roots())
    gemma = by_path(entries, fake.paths["gemma"])
    assert gemma.name == "gemma-2 2B it · Q4_K_M"
    assert gemma.architecture == "gemma2" and gemma.context_length == 8192
    assert gemma.problem.startswith("architecture 'gemma2' is not supported")
    corrupt = by_path(entries, fake.paths["corrupt"])
    assert corrupt.name == "broken.gguf" and corrupt.architecture is None
    assert "tensors, over the limit" in corrupt.problem
    table = render_table(entries)
    assert "gemma-2 2B it · Q4_K_M" in table and gemma.problem in table
    assert str(fake.paths["corrupt"]) in table


def test_unsupported_tensor_type_is_the_reason(fake: FakeHome) -> None:
    header = read_header(fake.paths["bundled"])
    assert problem_of(header) is None
    bad = header.tensors[3].__class__(header.tensors[3].name,
                                      int(gguf.GGMLQuantizationType.TQ1_0),
                                      header.tensors[3].shape, header.tensors[3].offset)
    header.tensors[3] = bad
    assert problem_of(header) == f"tensor {bad.name} has unsupported type TQ1_0"


def test_environment_overrides(fake: FakeHome, tmp_path: Path) -> None:
    """OLLAMA_MODELS and HF_HOME move those stores; nothing is read from os.environ."""
    moved = tmp_path / "ollama"
    (fake.home / ".ollama" / "models").rename(moved)
    try:
        env = {"OLLAMA_MODELS": str(moved), "HF_HOME": str(tmp_path / "no-hf")}
        found = list(find_ggufs(Roots(fake.home, env, None)))
        assert {f.alias for f in found if f.source == "ollama"} >= {"tinyllama:1b"}
        assert not [f for f in found if f.source == "hf"]
        assert not [f for f in find_ggufs(Roots(fake.home, {}, None)) if f.source == "ollama"]
    finally:
        moved.rename(fake.home / ".ollama" / "models")


def test_names_resolve_or_say_which_candidates(fake: FakeHome) -> None:
    roots = fake.roots()
    entries = scan(roots)
    assert resolve("tinyllama:1b", entries).path == str(fake.paths["ollama"])
    assert resolve("tiny-test-llama · Q8_0", entries).path == str(fake.paths["lmstudio"])
    assert resolve("q5_1", entries).path == str(fake.paths["channel_models"])  # any case
    assert resolve_model("tinyllama:latest", roots) == fake.paths["ollama"]
    with pytest.raises(ModelChoiceError, match=r"'tiny-test' names \d+ models: .*lmstudio"):
        resolve("tiny-test", entries)
    with pytest.raises(ModelChoiceError, match="no model named 'nosuch'.*tinyllama:1b"):
        resolve("nosuch", entries)
    with pytest.raises(ModelChoiceError, match="gemma-2 2B it · Q4_K_M cannot run: "
                                               "architecture 'gemma2'"):
        resolve_model("gemma", roots)
    assert resolve_model("some/dir/x.gguf", roots) == Path("some/dir/x.gguf")  # a path


def test_file_names_and_stems_resolve(fake: FakeHome, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """--model takes a listed file's name or stem (what `channel pull` prints), any case;
    a bare file name that is a file here is still that file."""
    roots = fake.roots()
    monkeypatch.chdir(tmp_path)
    assert resolve_model("tiny-q8_0.gguf", roots) == fake.paths["lmstudio"]
    assert resolve_model("tiny-q8_0", roots) == fake.paths["lmstudio"]
    assert resolve_model("TINY-F16", roots) == fake.paths["hf"]  # the hub snapshot's name
    with pytest.raises(ModelChoiceError, match="no model named 'missing.gguf' "):
        resolve_model("missing.gguf", roots)
    (tmp_path / "tiny-q8_0.gguf").write_bytes(b"")
    assert resolve_model("tiny-q8_0.gguf", roots) == Path("tiny-q8_0.gguf")


def test_shipped_model_scans_in_milliseconds() -> None:
    """The bundled 98 MB model, whose 49k-entry vocabulary gguf-py takes seconds over."""
    import time

    path = default_model_path()
    t0 = time.perf_counter()
    [entry] = scan(Roots(Path("/nonexistent-home"), {}, path))
    elapsed = time.perf_counter() - t0
    assert entry.supported and entry.architecture == "llama" and entry.quantization == "Q4_1"
    assert entry.name.startswith("SmolLM2 135M") and entry.context_length == 8192
    assert elapsed < 1.0, f"scan took {elapsed:.3f} s"


def run_cli(fake: FakeHome, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "channel_cli.cli", *args], cwd=REPO,
                          env=fake.process_env(), capture_output=True, text=True,
                          timeout=timeout)


def test_channel_models_json_subprocess(fake: FakeHome) -> None:
    done = run_cli(fake, "models", "--json")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    paths = {row["path"]: row for row in rows}
    for role in ("hf", "lmstudio", "gpt4all", "ollama", "channel_models", "gemma", "corrupt"):
        assert str(fake.paths[role]) in paths, role
    assert paths[str(default_model_path())]["source"] == "bundled"  # the real one, here
    gemma = paths[str(fake.paths["gemma"])]
    assert gemma["supported"] is False and gemma["status"] == gemma["problem"]
    assert {"name", "architecture", "parameters", "quantization", "file_size",
            "context_length", "source", "aliases"} <= set(gemma)
    table = run_cli(fake, "models")
    assert table.returncode == 0 and "tinyllama:1b (tiny-test-llama · Q4_1)" in table.stdout


def test_channel_chat_with_an_ollama_name(fake: FakeHome, tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = run_cli(fake, "chat", "--model", "tinyllama:1b", "--data-dir", str(data),
                   "--cache-dir", str(tmp_path / "cache"), "--max-tokens", "4", "--json", "hi")
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["model"] == "tiny-test-llama" and reply["decode_tokens"] >= 1
    record = json.loads((data / "default.model.json").read_text())
    assert record["path"] == str(fake.paths["ollama"].resolve())


def test_bad_model_names_are_one_line_errors(fake: FakeHome) -> None:
    for name, expected in (("tiny-test", "names"), ("nosuch", "no model named 'nosuch'")):
        done = run_cli(fake, "chat", "--model", name, "hi", timeout=60)
        assert done.returncode == 2 and done.stdout == ""
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("channel: error: ") and expected in lines[0]


def test_tokenizer_problems_are_the_reason(fake: FakeHome) -> None:
    """What loading would refuse about the tokenizer, from the header alone."""
    header = read_header(fake.paths["bundled"])
    assert problem_of(header) is None
    header.metadata["tokenizer.ggml.pre"] = "no-such-pre"
    assert problem_of(header).startswith("pre-tokenizer 'no-such-pre' is not supported")
    header.metadata["tokenizer.ggml.model"] = "rwkv"
    assert problem_of(header).startswith("tokenizer model 'rwkv' is not supported")
