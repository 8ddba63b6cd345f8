"""`channel pull` run as a real subprocess against a local stand-in for the hub
(tests/hub_server.py, reached through HF_ENDPOINT), never the network: the file lands in the
hub cache where `channel models` lists it; a cut transfer resumes with a Range request, in
the same run and on the next; a wrong checksum leaves nothing; an unreachable hub, an
unknown repository and an ambiguous choice are each one line."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.tools.pull_choice import PullError, PullSpec, choose_gguf, parse_spec

from .hub_server import COMMIT, FakeHub
from .tiny_model import write_tiny_gguf

REPO = Path(__file__).resolve().parent.parent
CHUNK = 10 * 1024 * 1024  # huggingface_hub writes the transfer in chunks this large
REPO_ID = "someone/tiny-GGUF"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> bytes:
    path = write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")
    return path.read_bytes()


@pytest.fixture(scope="module")
def big(tiny: bytes) -> bytes:
    """The tiny GGUF padded past one chunk and a half, so that a cut keeps a chunk."""
    return tiny + bytes(CHUNK + CHUNK // 2)


@pytest.fixture
def hub():
    server = FakeHub()
    yield server
    server.close()


def hub_env(home: Path, endpoint: str) -> dict[str, str]:
    """A child's environment: a fresh HOME and hub cache, the stand-in hub, no token."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGINGFACE_", "XDG_", "OLLAMA_", "CHANNEL_"))}
    env.update(HOME=str(home), HF_HOME=str(home / "hf"), HF_ENDPOINT=endpoint,
               HF_HUB_DISABLE_TELEMETRY="1", PYTHONPATH=str(REPO))
    return env


def channel(env: dict[str, str], *args: str, timeout: float = 120,
            ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "channel_cli.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("channel: error:")]


def repo_cache(home: Path, repo: str = REPO_ID) -> Path:
    return home / "hf" / "hub" / ("models--" + repo.replace("/", "--"))


def test_pull_lands_in_the_hub_cache_and_models_lists_it(hub: FakeHub, tiny: bytes,
                                                          tmp_path: Path) -> None:
    hub.add(REPO_ID, "tiny.Q8_0.gguf", tiny)
    hub.add(REPO_ID, "README.md", b"# tiny\n")
    env = hub_env(tmp_path, hub.url)
    done = channel(env, "pull", REPO_ID)
    assert done.returncode == 0, done.stderr
    assert "downloading [" in done.stderr and "100.0%" in done.stderr  # the progress bar
    assert "verifying [" in done.stderr
    snapshot = repo_cache(tmp_path) / "snapshots" / COMMIT / "tiny.Q8_0.gguf"
    sha = hashlib.sha256(tiny).hexdigest()
    assert str(snapshot) in done.stdout and "ready: channel --model tiny.Q8_0.gguf" in done.stdout
    # The hub cache's own layout: a link into blobs/<sha256>, and refs/main.
    assert snapshot.is_symlink() and snapshot.resolve().name == sha
    assert snapshot.read_bytes() == tiny
    assert (repo_cache(tmp_path) / "refs" / "main").read_text() == COMMIT
    again = channel(env, "pull", f"{REPO_ID}:tiny.Q8_0.gguf", "--json")
    assert again.returncode == 0, again.stderr
    record = json.loads(again.stdout)
    assert record == {"repo": REPO_ID, "file": "tiny.Q8_0.gguf", "path": str(snapshot),
                      "size": len(tiny), "resumed_from": 0, "downloaded": False,
                      "name": "tiny-test-llama · F32", "supported": True, "problem": None}
    assert len(hub.ranges("tiny.Q8_0.gguf")) == 1  # the second run downloaded nothing
    listed = channel(env, "models", "--json")
    assert listed.returncode == 0, listed.stderr
    [entry] = [json.loads(line) for line in listed.stdout.splitlines()
               if json.loads(line)["source"] == "hf"]
    assert entry["path"] == str(snapshot) and entry["supported"]


def test_quant_tags_choose_and_several_ggufs_ask(hub: FakeHub, tiny: bytes,
                                                  tmp_path: Path) -> None:
    for name in ("m-Q4_K_M.gguf", "m-Q4_K.gguf", "m-Q8_0.gguf", "mmproj-m-f16.gguf"):
        hub.add(REPO_ID, name, tiny)
    env = hub_env(tmp_path, hub.url)
    asked = channel(env, "pull", REPO_ID)
    assert asked.returncode == 2
    assert errors(asked.stderr) == [
        f"channel: error: {REPO_ID} has 3 GGUF files; name one after a colon, a file or a "
        f"quantization (e.g. {REPO_ID}:Q4_K_M): m-Q4_K.gguf, m-Q4_K_M.gguf, m-Q8_0.gguf"]
    assert not repo_cache(tmp_path).exists()
    chosen = channel(env, "pull", f"{REPO_ID}:q4_k", "--json")
    assert chosen.returncode == 0, chosen.stderr
    assert json.loads(chosen.stdout)["file"] == "m-Q4_K.gguf"  # not m-Q4_K_M.gguf


def test_a_cut_connection_resumes_with_a_range_request(hub: FakeHub, big: bytes,
                                                       tmp_path: Path) -> None:
    """The server closes the connection half way; the same run asks for the rest."""
    hub.add(REPO_ID, "big.gguf", big, cut_at=CHUNK + CHUNK // 4)
    done = channel(hub_env(tmp_path, hub.url), "pull", REPO_ID, "--json")
    assert done.returncode == 0, done.stderr
    assert hub.ranges("big.gguf") == [None, f"bytes={CHUNK}-"]
    assert Path(json.loads(done.stdout)["path"]).read_bytes() == big
    notes = [line for line in done.stderr.splitlines() if "resume" in line.lower()]
    assert notes and all(line.startswith("channel: note:") for line in notes)


def test_an_interrupted_pull_resumes_on_the_next_run(hub: FakeHub, big: bytes,
                                                     tmp_path: Path) -> None:
    """Ctrl+C half way keeps what arrived; the next `channel pull` asks only for the rest."""
    file = hub.add(REPO_ID, "big.gguf", big, stall_at=CHUNK + CHUNK // 4)
    env = hub_env(tmp_path, hub.url)
    partial = (repo_cache(tmp_path) / "blobs" /
               (hashlib.sha256(big).hexdigest() + ".incomplete"))
    first = subprocess.Popen([sys.executable, "-m", "channel_cli.cli", "pull", REPO_ID],
                             cwd=REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (partial.exists() and partial.stat().st_size >= CHUNK):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.05)
    first.send_signal(signal.SIGINT)
    _, stderr = first.communicate(timeout=30)
    file.release.set()
    assert first.returncode == 130, stderr
    assert "interrupted; what was downloaded is kept" in stderr
    assert partial.stat().st_size == CHUNK
    second = channel(env, "pull", REPO_ID, "--json")
    assert second.returncode == 0, second.stderr
    assert hub.ranges("big.gguf") == [None, f"bytes={CHUNK}-"]
    record = json.loads(second.stdout)
    assert record["resumed_from"] == CHUNK and record["downloaded"]
    assert Path(record["path"]).read_bytes() == big and not partial.exists()


def test_a_wrong_checksum_is_refused_and_nothing_kept(hub: FakeHub, tiny: bytes,
                                                      tmp_path: Path) -> None:
    hub.add(REPO_ID, "tiny.gguf", tiny, sha256="ab" * 32)
    done = channel(hub_env(tmp_path, hub.url), "pull", REPO_ID)
    assert done.returncode == 2
    [line] = errors(done.stderr)
    assert line.startswith(f"channel: error: tiny.gguf from {REPO_ID} failed its checksum "
                           f"(sha256 {hashlib.sha256(tiny).hexdigest()[:16]}…, the hub says "
                           f"abababababababab…)")
    assert "Traceback" not in done.stderr
    cache = repo_cache(tmp_path)
    assert not [p for p in (cache / "snapshots").rglob("*") if p.is_file()]
    assert list((cache / "blobs").iterdir()) == []  # no blob, no partial


def test_an_unreachable_hub_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{s.getsockname()[1]}"
    done = channel(hub_env(tmp_path, endpoint), "pull", REPO_ID)
    assert done.returncode == 2
    [line] = errors(done.stderr)
    assert line.startswith(f"channel: error: cannot reach the Hugging Face hub at {endpoint}: ")
    assert "offline?" in line and "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 2  # "pulling ... from ..." and the error


def test_unknown_repository_and_bad_spec(hub: FakeHub, tmp_path: Path) -> None:
    env = hub_env(tmp_path, hub.url)
    missing = channel(env, "pull", "nobody/nothing-GGUF:Q4_K_M")
    assert errors(missing.stderr) == [
        f"channel: error: no model repository nobody/nothing-GGUF at {hub.url} (a private "
        f"one needs `hf auth login`)"]
    bad = channel(env, "pull", "just-a-name")
    assert bad.returncode == 2 and errors(bad.stderr) == [
        "channel: error: 'just-a-name' is not a Hugging Face model repository: give "
        "ORG/NAME, optionally :FILE or :QUANT (e.g. bartowski/Qwen2.5-0.5B-Instruct-GGUF"
        ":Q4_K_M)"]
    assert not any(s.path.startswith("/api/models/just") for s in hub.seen)


FILES = ["README.md", "Qwen-0.5B-Q4_K_M.gguf", "Qwen-0.5B-Q4_K.gguf", "Qwen-0.5B-Q8_0.gguf",
         "big/Qwen-0.5B-F16-00001-of-00002.gguf", "big/Qwen-0.5B-F16-00002-of-00002.gguf",
         "mmproj-Qwen-0.5B-f16.gguf"]


@pytest.mark.parametrize(("want", "chosen"), [
    ("Q4_K_M", "Qwen-0.5B-Q4_K_M.gguf"), ("q8_0", "Qwen-0.5B-Q8_0.gguf"),
    ("Q4_K", "Qwen-0.5B-Q4_K.gguf"), ("Qwen-0.5B-Q4_K.gguf", "Qwen-0.5B-Q4_K.gguf"),
    ("qwen-0.5b-q8_0", "Qwen-0.5B-Q8_0.gguf"),  # a stem, any case
    ("mmproj-Qwen-0.5B-f16.gguf", "mmproj-Qwen-0.5B-f16.gguf"),  # named, so meant
])
def test_choose_a_gguf(want: str, chosen: str) -> None:
    assert choose_gguf(PullSpec("o/r", want), FILES) == chosen


@pytest.mark.parametrize(("want", "files", "message"), [
    (None, ["a.txt"], "o/r has no GGUF file (1 files"),
    ("Q5_K_M", FILES, "o/r has no GGUF named or tagged 'Q5_K_M'; its GGUF files: "
                      "Qwen-0.5B-Q4_K.gguf, Qwen-0.5B-Q4_K_M.gguf, "),
    ("F16", FILES, "Qwen-0.5B-F16-00001-of-00002.gguf in o/r is part 1 of a GGUF split into "
                   "2 files"),
    ("0.5B", FILES, "o/r:0.5B matches 5 files; name one: "),
])
def test_choices_that_name_no_single_gguf(want, files, message) -> None:
    with pytest.raises(PullError) as caught:
        choose_gguf(PullSpec("o/r", want), files)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_specs_read() -> None:
    assert parse_spec("hf.co/org/name-GGUF:Q4_K_M") == PullSpec("org/name-GGUF", "Q4_K_M")
    assert parse_spec("https://huggingface.co/org/name/") == PullSpec("org/name", None)
    for bad in ("org", "org/na/me", "../x", "org/..", ":Q4"):
        with pytest.raises(PullError, match="is not a Hugging Face model repository"):
            parse_spec(bad)
