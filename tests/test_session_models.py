"""Sessions remember their model, through real engine processes on tiny models: a session
reopens on the model it was made with whatever the engine was started with, a session's
model that is gone or changed is refused with one line naming the file, and the `models`
request lists the catalog."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.process.client import EngineProcess, spawn
from engine.process.protocol import ProtocolError, parse_request

from .model_homes import make_fake_home
from .tiny_model import TinySpec, write_tiny_gguf


@pytest.fixture
def two_models(tmp_path: Path) -> tuple[Path, Path]:
    return (write_tiny_gguf(tmp_path / "a.gguf", TinySpec(seed=11)),
            write_tiny_gguf(tmp_path / "b.gguf", TinySpec(seed=12)))


@pytest.fixture
def engines(tmp_path: Path):
    """Start engines on a model (data and cache in tmp_path); all are stopped at the end."""
    started: list[EngineProcess] = []

    def start(model: Path) -> tuple[EngineProcess, dict]:
        proc = spawn(tmp_path / "data", tmp_path / "cache", model, ["--backend", "numpy"])
        started.append(proc)
        return proc, proc.wait_for("ready", timeout=120)

    yield start
    for proc in started:
        if proc.proc.poll() is None:
            proc.proc.kill()
            proc.proc.wait(10)


def stop(proc: EngineProcess) -> None:
    proc.request({"type": "shutdown"}, "bye")
    assert proc.close() == 0


def turn(proc: EngineProcess, session: str) -> dict:
    end = proc.request({"type": "turn", "session": session, "text": "hi", "max_tokens": 4},
                       "end_of_turn")
    assert end["type"] == "end_of_turn", end
    return end


def test_session_reopens_on_its_own_model(engines, two_models, tmp_path: Path) -> None:
    a, b = two_models
    first, ready = engines(a)
    booted = first.request({"type": "open", "session": "s"}, "booted")
    assert booted["model_path"] == str(a) and booted["kind"] == "cold"
    turn(first, "s")
    stop(first)
    record = json.loads((tmp_path / "data" / "s.model.json").read_text())
    assert record["path"] == str(a.resolve()) and record["fingerprint"] == ready["fingerprint"]

    second, ready_b = engines(b)
    assert ready_b["model_path"] == str(b) and ready_b["fingerprint"] != record["fingerprint"]
    again = second.request({"type": "open", "session": "s"}, "booted")
    assert again["model_path"] == str(a.resolve())
    assert again["fingerprint"] == record["fingerprint"]
    assert again["kind"] == "warm", again["reason"]  # its snapshot is of model A: it fits
    turn(second, "s")
    fresh = second.request({"type": "open", "session": "t"}, "booted")
    assert fresh["fingerprint"] == ready_b["fingerprint"]  # new sessions: the engine's model
    chosen = second.request({"type": "open", "session": "u", "model": str(a)}, "booted")
    assert chosen["fingerprint"] == record["fingerprint"]
    refused = second.request({"type": "open", "session": "s", "model": str(b)}, "booted")
    assert refused["type"] == "error" and "open a new session to use" in refused["message"]
    stop(second)
    assert json.loads((tmp_path / "data" / "u.model.json").read_text())["path"] == \
        str(a.resolve())


def test_a_gone_or_changed_model_is_refused(engines, two_models, tmp_path: Path) -> None:
    a, b = two_models
    first, _ = engines(a)
    first.request({"type": "open", "session": "s"}, "booted")
    stop(first)
    a.rename(tmp_path / "moved.gguf")
    second, _ = engines(b)
    gone = second.request({"type": "open", "session": "s"}, "booted")
    assert gone["type"] == "error"
    assert gone["message"] == (f"session 's' runs on model 'tiny-test-llama', whose file is "
                               f"gone: {a.resolve()}")
    write_tiny_gguf(a, TinySpec(seed=13))  # another model at the recorded path
    changed = second.request({"type": "open", "session": "s"}, "booted")
    assert changed["type"] == "error" and "whose file has changed" in changed["message"]
    assert changed["message"].endswith(str(a.resolve()))
    assert "\n" not in changed["message"]
    stop(second)


def test_snapshot_of_another_model_is_refused_with_the_reason(engines, two_models,
                                                              tmp_path: Path) -> None:
    """A session from before models were recorded (no record) opened on another model: its
    snapshot is never restored into it, and the boot says why."""
    a, b = two_models
    first, _ = engines(a)
    first.request({"type": "open", "session": "old"}, "booted")
    turn(first, "old")
    stop(first)
    (tmp_path / "data" / "old.model.json").unlink()
    second, ready_b = engines(b)
    booted = second.request({"type": "open", "session": "old"}, "booted")
    assert booted["kind"] == "cold"
    assert booted["reason"].startswith("snapshot refused: different model")
    assert booted["fingerprint"] == ready_b["fingerprint"]
    stop(second)


def test_models_request_lists_the_catalog(tmp_path: Path, tiny_gguf: Path,
                                          tiny_cache: Path) -> None:
    fake = make_fake_home(tmp_path / "fake")
    proc = EngineProcess(["--data-dir", str(tmp_path / "data"), "--cache-dir", str(tiny_cache),
                          "--model", str(tiny_gguf)], env=fake.process_env())
    try:
        proc.wait_for("ready", timeout=120)
        event = proc.request({"type": "models"}, "models")
        assert event["type"] == "models"
        listed = {m["path"]: m for m in event["models"]}
        assert str(fake.paths["ollama"]) in listed and str(fake.paths["gemma"]) in listed
        assert listed[str(fake.paths["ollama"])]["aliases"][0] == "tinyllama:1b"
        assert listed[str(fake.paths["gemma"])]["supported"] is False
        opened = proc.request({"type": "open", "session": "o",
                               "model": str(fake.paths["ollama"])}, "booted")
        assert opened["model_path"] == str(fake.paths["ollama"].resolve())
        turn(proc, "o")
        stop(proc)
    finally:
        if proc.proc.poll() is None:
            proc.proc.kill()


@pytest.mark.parametrize("model, problem", [
    ("models/x.gguf", "must be an absolute path"),
    ("/" + "x" * 5000, "the limit is 4096"),
])
def test_open_model_field_is_checked(model: str, problem: str) -> None:
    with pytest.raises(ProtocolError, match=problem):
        parse_request(json.dumps({"type": "open", "session": "s", "model": model}))
    request = parse_request('{"type": "open", "session": "s", "model": "/m/a.gguf"}')
    assert request.args["model"] == "/m/a.gguf"
    assert parse_request('{"type": "models", "id": 3}').type == "models"
