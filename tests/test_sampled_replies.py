"""Sampled replies through the engine process (issue 29): the model's default settings, what
a reply's event records (settings, seed, speed), a warm boot that continues the saved
generator, a regenerate that draws another seed, and the request fields' one-line errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.model.model import load_model
from engine.process.client import EngineProcess
from engine.process.protocol import ProtocolError, parse_request
from engine.state.sampling import another_seed
from engine.state.sampling_defaults import BASE_DEFAULTS, defaults_for

from .conftest import SHARED_CACHE, engine_starter
from .tiny_model import _add_tiny_tokenizer, write_tiny_gguf

REPO = Path(__file__).resolve().parent.parent


def replies(data: Path, session: str = "s") -> list[dict]:
    lines = (data / f"{session}.stream.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    return [e for e in events if e["role"] == "assistant" and not e.get("retracts")]


def test_a_turn_without_settings_gets_the_models_defaults(engine, tmp_path) -> None:
    e = engine()
    e.request({"type": "open", "session": "s"}, "booted")
    end = e.request({"type": "turn", "session": "s", "text": "hello", "max_tokens": 12},
                    "end_of_turn")
    assert isinstance(end["seed"], int)
    assert end["ttft_ms"] > 0 and end["prefill_tok_s"] > 0 and "decode_tok_s" in end
    some = e.request({"type": "turn", "session": "s", "text": "and?", "top_k": 5,
                      "max_tokens": 4}, "end_of_turn")
    greedy = e.request({"type": "turn", "session": "s", "text": "so?", "temperature": 0,
                        "max_tokens": 4}, "end_of_turn")
    assert "seed" not in greedy and some["seed"] not in (None, end["seed"])
    e.close()
    first, second, third = replies(tmp_path / "data")
    # The tiny model's GGUF recommends nothing: llama.cpp's defaults and a mild penalty.
    assert {k: first[k] for k in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty",
                                  "seed")} == {"temperature": 0.8, "top_k": 40, "top_p": 0.95,
                                               "min_p": 0.05, "repeat_penalty": 1.1,
                                               "seed": end["seed"]}
    assert first["ttft_ms"] == end["ttft_ms"] and first["prefill_tok_s"] == end["prefill_tok_s"]
    assert second["top_k"] == 5 and second["min_p"] == 0.05  # the rest stay the model's
    assert third["temperature"] == 0.0 and "seed" not in third
    # After a restart the transcript still has each reply's figures and seed.
    again = engine()
    shown = again.request({"type": "open", "session": "s"}, "booted")["transcript"]
    again.close()
    reply = next(m for m in shown if m["id"] == end["event_id"])
    assert (reply["ttft_ms"], reply["prefill_tok_s"], reply["seed"]) == \
        (end["ttft_ms"], end["prefill_tok_s"], end["seed"])


@pytest.fixture
def real_engine(tmp_path, real_model_path):
    """Engine processes on the shipped model (the tiny model's random weights put nearly all
    the probability on one token, so its sampled replies are its greedy ones)."""
    yield from engine_starter(real_model_path, SHARED_CACHE, tmp_path / "data",
                              ready_timeout=180)


def turn(e: EngineProcess, text: str, **settings) -> dict:
    end = e.request({"type": "turn", "session": "s", "text": text, "max_tokens": 24,
                     **settings}, "end_of_turn", timeout=300)
    assert end["type"] == "end_of_turn", end
    return end


@pytest.mark.real_model
def test_a_warm_boot_gives_the_same_next_sampled_reply(real_engine, tmp_path) -> None:
    """The process that saved the state and one that boots warm from it answer the next
    message alike: the conversation's generator (which seeds each reply) is in the snapshot."""
    data, copy = tmp_path / "data", tmp_path / "copy"
    saver = real_engine(data_dir=data)
    saver.request({"type": "open", "session": "s"}, "booted")
    turn(saver, "Name a fruit.")
    assert saver.request({"type": "save", "session": "s"}, "snapshot")["status"] == "saved"
    shutil.copytree(data, copy, ignore=shutil.ignore_patterns("*.lock"))
    ahead = turn(saver, "Write one sentence about the sea.")
    saver.close()
    booted = real_engine(data_dir=copy)
    assert booted.request({"type": "open", "session": "s"}, "booted",
                          timeout=300)["kind"] == "warm"
    again = turn(booted, "Write one sentence about the sea.")
    booted.close()
    assert again["seed"] == ahead["seed"] and again["reply"] == ahead["reply"]
    assert replies(copy)[-1]["tokens"] == replies(data)[-1]["tokens"]
    assert replies(copy)[-1]["temperature"] == 0.8  # sampled, with the model's defaults


@pytest.mark.real_model
def test_regenerate_draws_another_seed_and_a_seed_reproduces_a_reply(real_engine,
                                                                    tmp_path) -> None:
    e = real_engine()
    e.request({"type": "open", "session": "s"}, "booted")
    first = turn(e, "Write one sentence about the sea.")
    again = e.send({"type": "regenerate", "session": "s", "max_tokens": 24})
    undone = e.wait_for(lambda ev: ev.get("req") == again and ev["type"] == "undone", 300)
    second = e.wait_for(lambda ev: ev.get("req") == again and ev["type"] == "end_of_turn", 300)
    assert undone["previous_seed"] == first["seed"]
    assert second["seed"] == another_seed(first["seed"]) and second["reply"] != first["reply"]
    # The first reply's seed, asked for, gives the first reply again from the same state.
    same = e.send({"type": "regenerate", "session": "s", "max_tokens": 24,
                   "seed": first["seed"]})
    third = e.wait_for(lambda ev: ev.get("req") == same and ev["type"] == "end_of_turn", 300)
    assert third["seed"] == first["seed"] and third["reply"] == first["reply"]
    e.close()
    kept = replies(tmp_path / "data")
    assert [r["seed"] for r in kept] == [first["seed"], second["seed"], first["seed"]]


@pytest.mark.parametrize(("field", "value", "message"), [
    ("min_p", 2, "turn: min_p must be from 0 to 1, got 2.0"),
    ("repeat_last_n", -3, "turn: repeat_last_n must be -1 (the whole reply) or from 0 to"),
    ("dry_base", 0.5, "turn: dry_base must be from 1 to 100, got 0.5"),
    ("typical_p", 0, "turn: typical_p must be in (0, 1], got 0.0"),
    ("frequency_penalty", "a lot", "turn: field 'frequency_penalty' must be float, got str"),
    ("dry_allowed_length", 1.5, "turn: field 'dry_allowed_length' must be int, got float"),
    ("xtc_probability", -0.1, "turn: xtc_probability must be from 0 to 1, got -0.1"),
])
def test_bad_sampling_fields_are_refused_in_one_line(field, value, message) -> None:
    line = json.dumps({"type": "turn", "session": "s", "text": "hi", field: value})
    with pytest.raises(ProtocolError) as info:
        parse_request(line)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_good_sampling_fields_are_kept_as_given() -> None:
    asked = {"min_p": 0.1, "typical_p": 0.9, "repeat_penalty": 1.2, "repeat_last_n": -1,
             "presence_penalty": 0.5, "frequency_penalty": 0.25, "dry_multiplier": 0.8,
             "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": 128,
             "xtc_probability": 0.5, "xtc_threshold": 0.1, "seed": 42}
    request = parse_request(json.dumps({"type": "regenerate", "session": "s", **asked}))
    assert request.settings == asked
    assert defaults_for().with_overrides(request.settings).top_k == 40


def write_recommending_gguf(path: Path) -> Path:
    def tokenizer(w) -> int:
        w.add_float32("general.sampling.temp", 0.6)
        w.add_uint32("general.sampling.top_k", 20)
        w.add_float32("general.sampling.min_p", 0.0)  # a declared zero is a choice
        w.add_int32("general.sampling.penalty_last_n", 32)
        w.add_float32("general.sampling.penalty_repeat", -3.0)  # out of range: not used
        w.add_string("general.sampling.sequence", "penalties;top_k;temperature")
        return _add_tiny_tokenizer(w)

    return write_tiny_gguf(path, tokenizer=tokenizer)


def test_a_ggufs_recommended_sampling_becomes_the_default(tmp_path) -> None:
    model = load_model(write_recommending_gguf(tmp_path / "rec.gguf"), tmp_path / "cache")
    assert model.recommended_sampling == pytest.approx(
        {"temp": 0.6, "top_k": 20, "min_p": 0.0, "penalty_last_n": 32, "penalty_repeat": -3.0})
    settings = defaults_for(model.recommended_sampling)
    assert settings.temperature == pytest.approx(0.6) and settings.top_k == 20
    assert settings.min_p == 0.0 and settings.repeat_last_n == 32
    assert settings.repeat_penalty == BASE_DEFAULTS.repeat_penalty == 1.1
    assert settings.top_p == BASE_DEFAULTS.top_p == 0.95  # not recommended: llama.cpp's
    again = load_model(tmp_path / "rec.gguf", tmp_path / "cache")  # from the metadata cache
    assert again.recommended_sampling == model.recommended_sampling


def channel_chat(tmp_path: Path, tiny_gguf: Path, tiny_cache: Path, *args: str):
    return subprocess.run(
        [sys.executable, "-m", "channel_cli.cli", "chat", "--json", "--model", str(tiny_gguf),
         "--cache-dir", str(tiny_cache), "--data-dir", str(tmp_path / "data"), *args],
        capture_output=True, text=True, cwd=REPO, timeout=300)


def test_channel_chat_samples_by_default_and_takes_every_setting(tmp_path, tiny_gguf,
                                                                 tiny_cache) -> None:
    sampled = channel_chat(tmp_path, tiny_gguf, tiny_cache, "--max-tokens", "4", "hi")
    assert sampled.returncode == 0, sampled.stderr
    assert isinstance(json.loads(sampled.stdout)["seed"], int)
    greedy = channel_chat(tmp_path, tiny_gguf, tiny_cache, "--max-tokens", "4",
                          "--temperature", "0", "--min-p", "0.1", "--repeat-penalty", "1.3",
                          "--dry-multiplier", "0.5", "--seed", "9", "hi")
    assert greedy.returncode == 0, greedy.stderr
    out = json.loads(greedy.stdout)
    assert out["seed"] is None and out["ttft_ms"] > 0
    bad = channel_chat(tmp_path, tiny_gguf, tiny_cache, "--min-p", "2", "hi")
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("channel: error: --min-p: min_p must be from 0 to 1, "
                                  "got 2.0")
