"""`channel pull REPO[:FILE or QUANT]`: a GGUF from the Hugging Face hub, with a progress bar
(engine/tools/pull.py does the work)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable

from channel_cli.cli_args import model_roots


def add_pull_command(sub) -> None:
    pull = sub.add_parser(
        "pull", help="download a GGUF from the Hugging Face hub into its cache",
        description="Download a GGUF from the Hugging Face hub into the hub's cache, where "
                    "`channel models` (and other tools) find it. A cut download resumes on "
                    "the next run; the file's sha256 is checked against the hub's.")
    pull.add_argument("spec", metavar="REPO[:FILE_OR_QUANT]",
                      help="ORG/NAME, then optionally a file name or a quantization tag "
                           "(e.g. bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M)")
    pull.add_argument("--json", action="store_true",
                      help="print one JSON object (path, size, repo, file, ...)")
    pull.set_defaults(handler=run_pull)


def run_pull(args: argparse.Namespace) -> int:
    from huggingface_hub import constants

    from engine.progress import ProgressBar
    from engine.tools.pull import pull
    from engine.tools.pull_choice import parse_spec

    spec = parse_spec(args.spec)
    bars: dict[str, ProgressBar] = {}
    _hub_warnings_in_one_line(lambda: [bar.close() for bar in bars.values()])

    def progress(phase: str, done: int, total: int) -> None:
        if phase not in bars:
            for bar in bars.values():
                bar.close()
            bars[phase] = ProgressBar("downloading" if phase == "download" else "verifying")
        bars[phase].update(done, total)

    # constants.ENDPOINT is HF_ENDPOINT when set (a mirror, or the tests' local server).
    print(f"channel: pulling {spec} from {constants.ENDPOINT}", file=sys.stderr)
    try:
        pulled = pull(spec, model_roots().hf_hub(), constants.ENDPOINT, progress)
    except KeyboardInterrupt:
        for bar in bars.values():
            bar.close()
        print("channel: interrupted; what was downloaded is kept, and `channel pull "
              f"{args.spec}` again goes on from there", file=sys.stderr)
        raise
    finally:
        for bar in bars.values():
            bar.close()
    if args.json:
        print(json.dumps(pulled.to_json(), ensure_ascii=False))
    else:
        how = ("downloaded" if not pulled.resumed_from else
               f"downloaded (resumed at {pulled.resumed_from:,} bytes)") \
            if pulled.downloaded else "already downloaded"
        print(f"{pulled.name}: {how}, {pulled.size:,} bytes\n  {pulled.path}")
    if pulled.problem:
        print(f"channel: warning: Channel cannot run this model: {pulled.problem}",
              file=sys.stderr)
        return 1
    if not args.json:
        print(f"ready: channel --model {pulled.path.name}")
    return 0


class _OneLine(logging.Handler):
    """huggingface_hub's warnings (a resumed connection, a retry) in one line each, on a
    line of their own: `end_bars` ends a progress bar's line first."""

    def __init__(self, end_bars: Callable[[], object]) -> None:
        super().__init__(logging.WARNING)
        self.end_bars = end_bars

    def emit(self, record: logging.LogRecord) -> None:
        self.end_bars()
        lines = [line.strip() for line in record.getMessage().splitlines() if line.strip()]
        print(f"channel: note: {'; '.join(lines) or record.levelname}", file=sys.stderr)


def _hub_warnings_in_one_line(end_bars: Callable[[], object]) -> None:
    from huggingface_hub.utils import logging as hub_logging

    logger = hub_logging.get_logger("huggingface_hub")  # adds its handler, replaced here
    logger.handlers[:] = [_OneLine(end_bars)]
    logger.propagate = False
