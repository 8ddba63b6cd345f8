"""Child process for the kill -9 test: keeps decoding and saving until it is killed.

argv: GGUF CACHE_DIR SNAPSHOT_PATH MODE. MODE `full`: every save a complete snapshot;
`chain`: segments, compacted whenever the chain passes 5% of its base (so kills land in
segment writes and in compactions alike). Prints one line per completed save.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from engine.conversation import Conversation
from engine.model.model import load_model
from engine.snapshot.chain import restore
from engine.snapshot.snapshotter import SnapshotStatus, Snapshotter
from engine.state.ring_policy import RingPolicy

POLICY = RingPolicy(max_slots=2048, recent_window=64, evict_batch=64, prefill_chunk=128)


def main() -> None:
    gguf, cache, path, mode = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
    model = load_model(gguf, cache)
    conv = Conversation(model, POLICY)
    # Pace the writer a little so that most kills land in the middle of a write.
    saver = Snapshotter(conv, path, progress=lambda done, total: time.sleep(0.002),
                        incremental=mode == "chain", compact_share=0.05)
    if path.exists():
        # Must always succeed, and with the whole chain: a kill leaves the old or the new
        # base, and whole segments or none (an unfinished one is only a .tmp).
        report = restore(conv, path)
        assert report.stopped is None, report.stopped
        saver.head = report.head
    else:
        conv.ingest([1, 2, 3], anchors=True)
        conv.ingest([5 + i % 200 for i in range(1500)])
    print("ready", flush=True)
    token = 7
    while True:
        conv.forward.decode_one_token(token)
        token = 3 + (token * 31) % 250
        result = saver.save("")
        assert result.status == SnapshotStatus.SAVED, result
        print("saved", result.clock, result.kind, flush=True)


if __name__ == "__main__":
    main()
