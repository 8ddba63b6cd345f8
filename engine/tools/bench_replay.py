"""The cold replay rate of a long-lived session, beside prefill, in one process.

A stream of many short events (a chat that went on for weeks) is booted cold; its replay rate
is the tokens the replay fed to the ring over the replay's whole time, template rendering and
tokenizing of every event included. Prefill of as many tokens in one call, on the same
backend in the same process, is the ceiling: issue 11 asks for replay ≥ 0.9× prefill.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from ulid import ULID

from ..backends.base import Backend
from ..conversation import Conversation
from ..model.model import Model
from ..session.session import Session
from ..session.stream import StreamEvent

WORDS = ("fine", "thanks", "sure", "okay", "noted", "right", "yes", "good", "great", "later")


def write_stream(path: Path, model: Model, events: int) -> None:
    """`events` one-word messages, user and assistant in turn, after the system prompt."""
    system = model.template.default_system_prompt() or "You are a helpful assistant."
    base = int(ULID())
    lines = [StreamEvent(str(ULID.from_int(base)), "system", system, "2026-01-01T00:00:00Z")]
    for i in range(events):
        role = "user" if i % 2 == 0 else "assistant"
        lines.append(StreamEvent(str(ULID.from_int(base + 1 + i)), role, WORDS[i % len(WORDS)],
                                 "2026-01-01T00:00:00Z"))
    path.write_text("".join(e.to_json() + "\n" for e in lines), encoding="utf-8")


def bench_replay(model: Model, backend: Backend, events: int, repeat: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="channel-bench-replay-") as scratch:
        write_stream(Path(scratch) / "bench.stream.jsonl", model, events)
        rates, tokens = [], 0
        for _ in range(repeat):
            session = Session(model, Path(scratch), "bench", backend=backend)
            report = session.boot(cold=True)
            tokens = report.replayed_tokens
            rates.append(tokens / (report.replay_ms / 1e3))
            del session
    ids = model.tokenizer.encode(" ".join(WORDS * (tokens // len(WORDS) + 1)))[:tokens]
    prefill = []
    for _ in range(repeat):
        conv = Conversation(model, backend=backend)
        t0 = time.perf_counter()
        conv.ingest(ids)
        prefill.append(tokens / (time.perf_counter() - t0))
        del conv
    replay_rate, prefill_rate = sorted(rates)[len(rates) // 2], sorted(prefill)[len(prefill) // 2]
    return {"replay_events": events, "replay_tokens": tokens,
            "replay_tok_s": round(replay_rate, 2),
            "replay_prefill_tok_s": round(prefill_rate, 2),
            "replay_vs_prefill": round(replay_rate / prefill_rate, 3)}
