"""A plain line-oriented chat on the terminal (the Textual app replaces it as `channel`)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from .model import Model
from .sampler import SamplingSettings
from .session import Session


def run_line_chat(model: Model, data_dir: Path, name: str, cold: bool = False) -> int:
    from .cli import boot_line

    session = Session(model, data_dir, name)
    boot = session.boot(cold=cold)
    for warning in boot.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"{model.name} · session {name}")
    print(boot_line(boot))
    print("Type a message and press Enter. Ctrl+C stops a reply; Ctrl+D or Ctrl+C quits.")
    cancel = {"requested": False}

    def on_sigint(signum, frame):  # noqa: ARG001
        cancel["requested"] = True

    try:
        while True:
            try:
                text = input("\n> ")
            except (EOFError, KeyboardInterrupt):
                print()
                return 0
            if not text.strip():
                continue
            cancel["requested"] = False
            previous = signal.signal(signal.SIGINT, on_sigint)
            try:
                result = session.turn(
                    text, SamplingSettings(), max_tokens=512,
                    on_text=lambda piece: print(piece, end="", flush=True),
                    should_stop=lambda: cancel["requested"],
                )
            finally:
                signal.signal(signal.SIGINT, previous)
            note = " [cancelled]" if result.stop == "cancelled" else ""
            print(f"{note}\n  ({len(result.reply_ids)} tokens, {result.decode_tok_s:.1f} tok/s)")
    finally:
        print("saving working state…", file=sys.stderr)
        saved = session.save(wait=True)
        print(f"snapshot {saved.status.name.lower()}"
              + (f": {saved.error}" if saved.error else f" ({saved.bytes / 1e6:.1f} MB)"),
              file=sys.stderr)
