"""Crash safety in figures: SIGKILL at random points, then a fresh engine must lose nothing.

Each trial does one thing to a live engine (a turn, a long prompt, a save, an autosave, an
open, or another program's send), kills it with SIGKILL at a random moment of it, starts a
new engine and opens the session again. Every trial checks:
- the snapshot on disk, if any, validates, and so does every segment of its chain (a kill
  mid-write leaves the old file, or an unfinished `.tmp`, never a torn one; segments a kill
  between a complete save's steps leaves behind name the old base, which is not damage);
- the boot is warm, or cold with its reason;
- no acknowledged message is lost: every message whose `turn_started` arrived (the engine
  acknowledges it once it is fsynced), and every line another program appended, is in the
  transcript the boot reports;
- the saved state is the state a cold replay of the stream builds (`channel snapshot
  verify`: engine/session/verify.py), checked on copies of the files before each restart;
- the next turn works.

CI runs 10 trials; `pytest tests/test_crash_trials.py --trials 200 -s` runs a long one and
prints the figures (docs/security.md has the last ones).
"""

from __future__ import annotations

import collections
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.backends.select import backend_for_model, fit_to_model
from engine.model.model import load_model
from engine.process.client import EngineProcess, spawn
from engine.session.stream import StreamLog
from engine.session.verify import verify_session
from engine.snapshot.inspect import inspect_snapshot

from .tiny_model import TinySpec, write_tiny_gguf

# Wider than the default tiny model, so a snapshot is big enough for kills to land mid-write.
SPEC = TinySpec(n_layers=4, d_model=256, n_heads=4, n_kv_heads=2, ffn_dim=256,
                context_length=4096, seed=11)
SCENARIOS = ("turn", "long prompt", "save", "autosave", "open", "external send", "regenerate",
             "edit", "rewind")
# Saves are segments of a chain (docs/snapshot.md, "Chains"); a low share makes every few
# saves a complete one, which archives the chain, so kills land in both kinds of write.
COMPACT_SHARE = "0.15"


# The hybrids too: their window planes, conv carries and delta-rule states are saved beside
# the ring (format 3).
HYBRID_FIXTURES = Path(__file__).parent / "fixtures" / "arch"


@pytest.fixture(scope="module", params=["wide", "gemma3", "lfm2", "qwen35"])
def crash_model(request, tmp_path_factory) -> tuple[Path, Path, Callable]:
    """The model's file, its weight cache (built once, not per trial), and a check of a
    session's saved state against a cold replay, on the backend the engines choose."""
    directory = tmp_path_factory.mktemp("crash-model")
    if request.param == "wide":
        gguf = write_tiny_gguf(directory / "crash.gguf", SPEC)
    else:
        gguf = HYBRID_FIXTURES / f"{request.param}.gguf"
    model = load_model(gguf, directory / "cache")
    choice = backend_for_model("auto", gguf, directory / "cache")  # as the engines choose
    backend = fit_to_model(choice, "auto", model.config).backend

    def verify(data: Path):
        return verify_session(model, data, "s", backend=backend)

    return gguf, directory / "cache", verify


class Trials:
    """One session under repeated SIGKILLs, and the figures they produce."""

    def __init__(self, model: tuple[Path, Path, Callable], data: Path, rng: random.Random):
        self.gguf, self.cache, self.verify = model
        self.data = data
        self.rng = rng
        self.stream_path = data / "s.stream.jsonl"
        self.acknowledged: set[str] = set()
        self.figures = collections.Counter(
            {"lost messages": 0, "corrupt snapshots": 0, "kills mid-write": 0,
             "kills mid-segment": 0, "warm differs from cold": 0})
        self.drift: list[str] = []  # what verify found, for the failure message
        self.cold_reasons: collections.Counter = collections.Counter()
        self.engine = self.start()

    def start(self) -> EngineProcess:
        engine = spawn(self.data, self.cache, self.gguf,
                       ["--debounce-s", "0.05", "--compact-share", COMPACT_SHARE])
        engine.wait_for("ready", timeout=60)
        booted = engine.request({"type": "open", "session": "s"}, "booted", timeout=120)
        assert booted["type"] == "booted", booted
        self.judge(booted)
        # The open answers a message a kill left pending; cancelled once it starts: these
        # trials are about what survives, not about replies.
        engine.sync(cancel_turns=True)
        return engine

    def judge(self, booted: dict) -> None:
        self.figures[f"{booted['kind']} boots"] += 1
        self.turns = sum(1 for m in booted["transcript"]
                         if m["role"] == "user" and not m.get("hidden"))
        if booted["kind"] == "cold":
            assert booted["reason"], booted
            self.cold_reasons[booted["reason"].split(":")[0]] += 1
        shown = {m["id"] for m in booted["transcript"]}
        self.figures["lost messages"] += len(self.acknowledged - shown)

    def turn(self, text: str, max_tokens: int = 8) -> dict:
        e = self.engine
        request_id = e.send({"type": "turn", "session": "s", "text": text,
                             "max_tokens": max_tokens})
        mine = lambda kind: lambda ev: (  # noqa: E731
            ev.get("req") == request_id and ev["type"] in (kind, "error"))
        for kind in ("turn_started", "end_of_turn"):
            event = e.wait_for(mine(kind), 120)
            assert event["type"] == kind, f"{event}; engine log: {e.stderr_lines[-10:]}"
            if kind == "turn_started":
                self.acknowledged.add(event["user_event_id"])
        return event

    def kill_during(self, scenario: str, n: int) -> None:
        e, rng = self.engine, self.rng
        if scenario in ("turn", "long prompt"):
            text = f"trial {n}: " + ("the then and " * 400 if scenario == "long prompt" else
                                     "tell me more")
            e.send({"type": "turn", "session": "s", "text": text, "max_tokens": 200})
            self.acknowledged.add(e.wait_for("turn_started", 60)["user_event_id"])
            time.sleep(rng.uniform(0, 0.05))
        elif scenario == "save":
            self.turn(f"trial {n}: before a save")
            e.send({"type": "save", "session": "s"})
            time.sleep(rng.uniform(0, 0.03))
        elif scenario == "autosave":
            self.turn(f"trial {n}: before an autosave", max_tokens=24)
            time.sleep(rng.uniform(0.03, 0.12))  # the 50 ms debounce fires in here
        elif scenario == "open":
            e.request({"type": "close", "session": "s"}, "closed")
            e.send({"type": "open", "session": "s"})
            time.sleep(rng.uniform(0, 0.03))
        elif scenario in ("regenerate", "edit"):  # F4's edit: undo, and at once a new message
            self.turn(f"trial {n}: to be edited", max_tokens=16)
            if scenario == "regenerate":
                e.send({"type": "regenerate", "session": "s", "max_tokens": 200})
            else:
                e.send({"type": "undo", "session": "s"})
                e.send({"type": "turn", "session": "s", "text": f"trial {n}: edited",
                        "max_tokens": 200})
            time.sleep(rng.uniform(0, 0.08))
        elif scenario == "rewind":  # back one turn (an error when there is none: harmless)
            self.turn(f"trial {n}: to be rewound", max_tokens=4)
            e.send({"type": "rewind", "session": "s", "turn": max(0, self.turns - 1)})
            time.sleep(rng.uniform(0, 0.05))
        else:  # another program appends a user line, as `channel send` does; it is answered
            sender = StreamLog(self.stream_path)
            sender.read()  # its ids follow the stream's
            self.acknowledged.add(sender.append("user", f"trial {n}: sent from outside").id)
            time.sleep(rng.uniform(0, 0.1))
        os.kill(e.proc.pid, signal.SIGKILL)
        e.proc.wait(30)

    def trial(self, n: int) -> None:
        scenario = self.rng.choice(SCENARIOS)
        self.figures[f"kill during {scenario}"] += 1
        self.kill_during(scenario, n)
        self.figures["kills mid-write"] += (self.data / "s.snapshot.bin.tmp").exists()
        self.figures["kills mid-segment"] += any((self.data / "s.snapshot.d").glob("*.seg.tmp"))
        snapshot = self.data / "s.snapshot.bin"
        if snapshot.exists():
            report = inspect_snapshot(snapshot)
            damaged = [s for s in report.get("chain", {}).get("segments", [])
                       if not s["valid"] and not s["reason"].startswith(
                           ("extends another base", "after an invalid segment"))]
            self.figures["corrupt snapshots"] += not report["valid"] or bool(damaged)
            self.figures["segments at a kill"] = max(self.figures["segments at a kill"], len(
                report.get("chain", {}).get("segments", [])))
        report = self.verify(self.data) if self.stream_path.exists() else None
        if report is not None and not report.ok:
            self.figures["warm differs from cold"] += 1
            self.drift.append(f"trial {n} ({scenario}): {report.problems}")
        self.engine = self.start()
        end = self.turn(f"trial {n}: the next turn")
        self.figures["next turns that worked"] += end["type"] == "end_of_turn"


def test_sigkill_at_random_points_loses_nothing(crash_model, tmp_path, pytestconfig) -> None:
    trials = pytestconfig.getoption("--trials")
    seed = pytestconfig.getoption("--trial-seed") or random.randrange(1 << 30)
    run = Trials(crash_model, tmp_path / "data", random.Random(seed))
    t0 = time.monotonic()
    try:
        for n in range(trials):
            run.trial(n)
            if (n + 1) % 25 == 0:  # a long run says how it goes (seen with -s)
                print(f"  {n + 1} trials, {time.monotonic() - t0:.0f} s: "
                      f"{dict(sorted(run.figures.items()))}", flush=True)
    finally:
        if run.engine.proc.poll() is None:
            run.engine.proc.kill()
    figures = dict(sorted(run.figures.items()))
    print(f"\ncrash trials: {trials} (seed {seed}, {time.monotonic() - t0:.0f} s): {figures}; "
          f"cold boots by reason: {dict(run.cold_reasons)}")
    assert figures["lost messages"] == 0 and figures["corrupt snapshots"] == 0
    assert figures["warm differs from cold"] == 0, run.drift
    assert figures["next turns that worked"] == trials
    assert figures.get("warm boots", 0) + figures.get("cold boots", 0) == trials + 1
