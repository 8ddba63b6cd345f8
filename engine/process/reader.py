"""The engine's stdin reader: bounded lines of bytes, and a loop that no line can stop.

Lines are read as bytes, never decoded here, so invalid UTF-8 is one refused request rather
than an exception in the reader, whatever the locale. They are read with os.read on the file
descriptor, not through sys.stdin: a thread blocked inside sys.stdin's buffered reader holds
its lock, and interpreter shutdown aborts on that lock. A line longer than the limit is not
held in memory: its first `limit + 1` bytes are passed on (to be refused for their size) and
the rest is dropped as it arrives. End of input, or a stdin that fails, always asks the engine
to shut down, so an engine never hangs without a reader.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

log = logging.getLogger("channel.engine")
Read = Callable[[int], bytes]  # os.read on a descriptor, or a file's read
CHUNK = 1 << 16


def bounded_lines(read: Read, limit: int) -> Iterator[bytes]:
    """Each line of the input without its newline, cut to `limit + 1` bytes if longer."""
    line = bytearray()  # the current line so far, never more than limit + 1 bytes
    dropping = False  # the current line is over the limit: the rest of it is dropped
    while True:
        data = read(CHUNK)
        if not data:
            if line:
                yield bytes(line)  # the last line, without a newline
            return
        start = 0
        while start < len(data):
            newline = data.find(b"\n", start)
            end = len(data) if newline < 0 else newline
            if not dropping:
                line += data[start:end]
                if len(line) > limit:
                    del line[limit + 1 :]
                    dropping = True
            if newline < 0:
                break
            yield bytes(line)
            line.clear()
            dropping = False
            start = newline + 1


def read_requests(read: Read, limit: int, submit: Callable[[bytes], None],
                  on_error: Callable[[BaseException], None],
                  on_end: Callable[[str], None]) -> None:
    """Feed every non-blank line to `submit` until end of input, then call `on_end`.

    An exception while handling one line goes to `on_error` and reading continues: a bad
    line must never leave the engine without a reader.
    """
    reason = "stdin closed"
    try:
        for line in bounded_lines(read, limit):
            if not line.strip():
                continue
            try:
                submit(line)
            except Exception as exc:
                log.exception("a request line could not be handled")
                on_error(exc)
    except (OSError, ValueError) as exc:  # stdin itself failed (or was closed under us)
        log.error("cannot read stdin: %s", exc)
        reason = f"stdin failed: {exc}"
    finally:
        on_end(reason)
