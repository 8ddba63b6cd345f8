"""A narrow stand-in for `python -m engine`, speaking docs/protocol.md with fixed answers.

For the TUI's SVG snapshot tests: every timing, id and ring cell is constant, so the
screenshots are deterministic; and for flows whose every step a test must see (F9's turn
list and rewind: `rewind` with and without `dry_run`, `fork` with `turn`). The real engine is
used by the behavioural tests.

Usage: python tests/fake_engine.py --data-dir D [--cold-boot] [--busy SESSION] (other engine
options ignored). --busy refuses to open SESSION, as when another Channel holds it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

MODEL = "SmolLM2 135M Instruct · Q4_1"  # the display name (engine/model/display_name.py)
CAPACITY = 512
ANCHORS = 24

TRANSCRIPT = [
    {"id": "01JDZ0000000000000000000S0", "role": "system", "ts": "2026-11-29T10:00:00.000Z",
     "content": "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
     "stop": None},
    {"id": "01JDZ0000000000000000000U1", "role": "user", "ts": "2026-11-29T10:00:05.000Z",
     "content": "How do I reverse a list in Python?", "stop": None},
    {"id": "01JDZ0000000000000000000A1", "role": "assistant", "ts": "2026-11-29T10:00:07.000Z",
     "content": "Use **slicing** or the `reverse()` method:\n\n```python\nitems = [1, 2, 3]\n"
                "items.reverse()\n```", "stop": "eot", "ttft_ms": 61.0, "prefill_tok_s": 310.0,
     "decode_tok_s": 44.5, "seed": 7},
]
HOLDER_PID = 4242  # the pid a --busy refusal names
# A turn whose text starts so is read slowly, as a long message is, until a cancel.
SLOW_READ = "read slowly:"
REPLY = ["The ", "ring ", "keeps ", "the ", "**working ", "memory**", " warm."]
# A turn whose text starts so is answered as a thinking model answers: reasoning in
# <think> … </think> first, its closing tag split across two tokens, then the answer.
THINK = "think:"
THINKING_REPLY = ["<think>", "\nThe user ", "wants one ", "short line.\n</th", "ink>",
                  "\n\n", "The ring ", "stays **warm**."]


def ring_cells(active: int) -> str:
    """A fixed salience pattern: anchors, older slots, the recent window, then free."""
    recent_from = max(ANCHORS, active - 64)
    cells = []
    for i in range(active):
        level = (i * 7) % 10
        if i < ANCHORS:
            cells.append("ABCDEFGHIJ"[level])
        elif i >= recent_from:
            cells.append("abcdefghij"[level])
        else:
            cells.append(str(level))
    return "".join(cells) + "." * (CAPACITY - active)


def turn_slots(turns: list[list[int]]) -> list[int]:
    """Where each turn's oldest kept token sits: turns follow the anchors back to back."""
    slots, at = [], ANCHORS + 100  # the system prompt's anchors, then older filler
    for _tokens, kept in turns:
        slots.append(at)
        at += kept
    return slots


class Fake:
    def __init__(self, data_dir: str, cold: bool, busy: str | None = None) -> None:
        self.data_dir = data_dir
        self.cold = cold
        self.busy = busy
        self.active = 300
        # [tokens, kept] per turn: the transcript's first turn lost 40 slots to eviction.
        self.turns = [[140, 100]]
        self.reading: tuple | None = None  # (req, session, message id) of a read under way
        # Each session's transcript, as `booted` and `rewound` carry it (hidden ones kept).
        self.transcripts: dict[str, list[dict]] = {}
        self.exchanges = 1  # turns written so far: ids U2/A2, U3/A3… follow the fixed ones

    def transcript(self, session: str) -> list[dict]:
        return self.transcripts.setdefault(session, [dict(m) for m in TRANSCRIPT])

    def user_turns(self, session: str) -> list[int]:
        """The index in the transcript of each kept user message: the turns, oldest first."""
        return [i for i, m in enumerate(self.transcript(session))
                if m["role"] == "user" and not m.get("hidden")]

    def rewind_plan(self, session: str, turn: int) -> dict:
        """Turn 1 and later come back warm from a kept link; turn 0 is a whole replay."""
        starts = self.user_turns(session)
        if not 0 <= turn < len(starts):
            raise ValueError(f"no turn {turn} to go back to: the conversation has "
                             f"{len(starts)} turn(s), and rewinding goes back to turns "
                             f"0..{max(len(starts) - 1, 0)}")
        later = [m["id"] for m in self.transcript(session)[starts[turn]:]
                 if not m.get("hidden")]
        turns = len(starts)
        if turn:
            text = (f"back to turn {turn} of {turns}: restores the state kept in the snapshot "
                    f"and {turn} segment(s), then re-reads 0 message(s)")
            kind, link, replay = "warm", f"kept in the snapshot and {turn} segment(s)", 0
        else:
            text = (f"back to turn 0 of {turns}: no saved state that old is kept, so it "
                    f"re-reads the conversation (1 messages)")
            kind, link, replay = "replay", "", 1
        return {"turn": turn, "turns": turns, "kind": kind, "link": link,
                "replay_events": replay, "retracted": later, "text": text}

    def emit(self, event: dict) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    def ring(self, req, session: str) -> None:
        self.emit({"type": "ring", "req": req, "session": session, "active": self.active,
                   "capacity": CAPACITY, "anchors": ANCHORS, "clock": self.active,
                   "next_pos": self.active, "evicted": 40, "rebases": 0, "recent_window": 64,
                   "cells": ring_cells(self.active), "turns": self.turns,
                   "turn_slots": turn_slots(self.turns), "older_turns_forgotten": False})

    def hello(self, kind: str, req=None) -> dict:
        return {"type": kind, "req": req, "protocol": 1, "model": MODEL,
                "model_path": "/models/smollm2.gguf", "fingerprint": "f" * 32,
                "backend": "ggml", "backend_info": {"backend": "ggml"},
                "data_dir": self.data_dir, "sessions": []}

    def boot_fields(self) -> dict:
        return {**self._boot_kind_fields(), "ring_slots": CAPACITY, "context_length": 8192,
                "kv_bytes": CAPACITY * 34_560}  # SmolLM2: 30 layers x 192 x (f16 K + f32 V)

    def _boot_kind_fields(self) -> dict:
        if self.cold:
            return {"kind": "cold", "reason": "no snapshot", "restore_ms": 0.0,
                    "replay_ms": 1840.0, "replayed_events": 3, "replayed_tokens": 276,
                    "restored_slots": 0, "snapshot_bytes": 0,
                    "phases_ms": {"read_stream": 0.4, "replay": 1840.0}, "warnings": []}
        return {"kind": "warm", "reason": "snapshot valid", "restore_ms": 4.2,
                "replay_ms": 0.0, "replayed_events": 0, "replayed_tokens": 0,
                "restored_slots": self.active, "snapshot_bytes": 6_912_000,
                "phases_ms": {"validate": 1.3, "copy": 2.9, "replay": 0.0}, "warnings": []}

    def handle(self, request: dict) -> bool:
        kind, req, session = request.get("type"), request.get("id"), request.get("session")
        if kind == "hello":
            self.emit(self.hello("hello", req))
        elif kind == "open" and session == self.busy:
            self.emit({"type": "error", "req": req, "session": session, "code": "session_busy",
                       "message": f"session {session!r} is open in another Channel "
                                  f"(pid {HOLDER_PID})"})
        elif kind == "models":  # this fake finds none: the picker's empty state
            self.emit({"type": "models", "req": req, "models": []})
        elif kind == "fork":
            turn, source = request.get("turn"), [dict(m) for m in self.transcript(session)]
            if turn is not None:  # the fork continues from the end of that turn
                plan = self.rewind_plan(session, turn)
                source = [m for m in source if m["id"] not in plan["retracted"]]
            self.transcripts[request.get("new")] = source
            self.emit({"type": "forked", "req": req, "session": session,
                       "new": request.get("new"), "events": len(source),
                       "snapshot_bytes": 6_912_000, "system_changed": False, "turn": turn})
        elif kind == "open":
            self.emit({"type": "booted", "req": req, "session": session, **self.boot_fields(),
                       "transcript": self.transcript(session)})
            self.ring(req, session)
        elif kind == "rewind":
            plan = self.rewind_plan(session, request["turn"])
            if request.get("dry_run"):
                self.emit({"type": "rewind_plan", "req": req, "session": session, **plan})
                return True
            for message in self.transcript(session):
                if message["id"] in plan["retracted"]:
                    message["hidden"] = True
            self.turns = self.turns[:plan["turn"]]
            self.active = ANCHORS + 100 + sum(kept for _, kept in self.turns)
            self.emit({"type": "rewound", "req": req, "session": session, **plan,
                       "method": plan["kind"] if plan["turn"] else "cold", "ms": 12.0,
                       "transcript": self.transcript(session)})
            self.ring(req, session)
            self.emit({"type": "snapshot", "req": req, "session": session,
                       "status": "pending", "due_in_ms": 5000})
        elif kind == "turn" and request.get("text", "").startswith(SLOW_READ):
            # A long message read slowly: progress twice, then it waits for a cancel.
            self.emit({"type": "turn_started", "req": req, "session": session,
                       "user_event_id": "01JDZ0000000000000000000B1"})
            for done in (256, 512):
                time.sleep(0.05)
                self.emit({"type": "prefill_progress", "req": req, "session": session,
                           "done": done, "total": 5000})
            self.reading = (req, session, "01JDZ0000000000000000000B1")
        elif kind == "turn":
            self.exchanges += 1
            user_id = f"01JDZ{'U' + str(self.exchanges):0>21}"
            reply_id = f"01JDZ{'A' + str(self.exchanges):0>21}"
            self.emit({"type": "turn_started", "req": req, "session": session})
            pieces = THINKING_REPLY if request.get("text", "").startswith(THINK) else REPLY
            for piece in pieces:
                self.emit({"type": "token", "req": req, "session": session, "text": piece})
            self.active += 20
            self.turns.append([20, 20])
            self.transcript(session).extend([
                {"id": user_id, "role": "user", "ts": "2026-11-29T10:01:00.000Z",
                 "content": request.get("text", ""), "stop": None},
                {"id": reply_id, "role": "assistant", "ts": "2026-11-29T10:01:01.000Z",
                 "content": "".join(pieces), "stop": "eot", "in_reply_to": user_id}])
            self.emit({"type": "end_of_turn", "req": req, "session": session,
                       "reply": "".join(pieces), "stop": "eot",
                       "event_id": reply_id,
                       "prompt_tokens": 13, "decode_tokens": 7, "ttft_ms": 52.0,
                       "prefill_tok_s": 250.0, "decode_tok_s": 42.0, "seed": 11,
                       "clock": self.active})
            self.ring(req, session)
            self.emit({"type": "snapshot", "session": session, "status": "pending",
                       "due_in_ms": 5000})
        elif kind == "save":
            self.emit({"type": "snapshot", "req": req, "session": session, "status": "exists"})
        elif kind == "restore":
            self.emit({"type": "restored", "req": req, "session": session,
                       **self.boot_fields(), "total_ms": 5.0, "transcript": TRANSCRIPT})
            self.ring(req, session)
        elif kind == "boot_compare":
            self.emit({"type": "snapshot", "req": req, "session": session, "status": "exists"})
            self.emit({"type": "boot_compare", "req": req, "session": session,
                       "cold_ms": 1843.5, "cold_replay_ms": 1840.0, "cold_tokens": 276,
                       "cold_events": 3, "warm_kind": "warm", "warm_reason": "snapshot valid",
                       "warm_ms": 4.6, "warm_restore_ms": 4.2, "warm_replay_ms": 0.0,
                       "warm_slots": self.active, "ratio": 400.8})
        elif kind == "cancel" and self.reading is not None:
            turn_req, _, message_id = self.reading
            self.reading = None
            self.emit({"type": "cancelling", "req": req, "session": session,
                       "turn_active": True})
            self.emit({"type": "end_of_turn", "req": turn_req, "session": session, "reply": "",
                       "stop": "cancelled", "event_id": "01JDZ0000000000000000000B2",
                       "prompt_tokens": 0, "decode_tokens": 0, "ttft_ms": 0.0,
                       "prefill_tok_s": 0.0, "decode_tok_s": 0.0, "seed": None,
                       "clock": self.active, "withdraws": message_id})
            self.ring(turn_req, session)
        elif kind == "cancel":
            self.emit({"type": "cancelling", "req": req, "session": session,
                       "turn_active": False})
        elif kind == "close":
            self.emit({"type": "snapshot", "req": req, "session": session, "status": "exists"})
            self.emit({"type": "closed", "req": req, "session": session})
        elif kind == "shutdown":
            self.emit({"type": "bye", "req": req, "reason": "shutdown requested"})
            return False
        return True


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default="/tmp/channel-fake")
    parser.add_argument("--cold-boot", action="store_true")
    parser.add_argument("--busy", default=None)
    args, _unknown = parser.parse_known_args()
    fake = Fake(args.data_dir, args.cold_boot, args.busy)
    fake.emit(fake.hello("ready"))
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            going_on = fake.handle(request)
        except ValueError as exc:  # as the engine answers a bad value: one line, then on
            fake.emit({"type": "error", "req": request.get("id"),
                       "session": request.get("session"), "code": "ValueError",
                       "message": str(exc)})
            going_on = True
        if not going_on:
            break
    else:
        fake.emit({"type": "bye", "reason": "stdin closed"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
