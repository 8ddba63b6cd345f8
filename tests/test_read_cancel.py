"""Esc during a long read on the shipped model (issue 29, item 6): the engine acknowledges the
cancel part-way through the read (ggml stops inside a prefill chunk), withdraws the message,
and a reopen lists it as withdrawn. How quickly is a figure, not a test:
scripts/measure_read_cancel.py measures it."""

from __future__ import annotations

import time

from engine.process.client import spawn

from .conftest import SHARED_CACHE

# Several prefill chunks on the shipped model: long enough to be cancelled part-way.
LONG = " ".join(f"Item {i}: the river bends past the mill and the miller counts sacks."
                for i in range(60))


def test_a_cancel_during_a_long_read_withdraws_the_message(
        tmp_path, real_model_path, real_model) -> None:  # real_model: builds SHARED_CACHE
    # The default backend: ggml stops inside a chunk, numpy (where ggml is not built) at the
    # next chunk's start; either way the read stops part-way.
    e = spawn(tmp_path / "data", SHARED_CACHE, real_model_path, [])
    try:
        e.wait_for("ready", timeout=300)
        e.request({"type": "open", "session": "s"}, "booted", timeout=300)
        e.send({"type": "turn", "session": "s", "text": LONG, "max_tokens": 4,
                "temperature": 0})
        started = e.wait_for("turn_started", timeout=60)
        first = e.wait_for("prefill_progress", timeout=120)
        assert 0 < first["done"] < first["total"]
        t0 = time.perf_counter()
        e.send({"type": "cancel", "session": "s"})
        end = e.wait_for("end_of_turn", timeout=60)
        took = time.perf_counter() - t0
        assert end["stop"] == "cancelled" and end["reply"] == ""
        assert end["withdraws"] == started["user_event_id"]
        print(f"cancel acknowledged in {took * 1e3:.0f} ms")
        e.send({"type": "close", "session": "s"})
        e.wait_for("closed", timeout=60)
        booted = e.request({"type": "open", "session": "s"}, "booted", timeout=300)
        withdrawal = [m for m in booted["transcript"] if m.get("withdraws")]
        assert [m["withdraws"] for m in withdrawal] == [started["user_event_id"]]
        assert withdrawal[0]["stop"] == "cancelled"
    finally:
        if e.proc.poll() is None:
            e.proc.kill()
            e.proc.wait(10)
