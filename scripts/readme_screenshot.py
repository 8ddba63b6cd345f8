"""Take the README's screenshot from a default first run: the shipped model, a new data
directory, every setting as it comes, one everyday question. Writes docs/screenshot.svg.

    .venv/bin/python scripts/readme_screenshot.py

Not a test picture: the timings in it are this machine's (tests/test_tui_snapshots.py has the
deterministic ones, on a stand-in engine).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from channel_tui.app import ChannelApp  # noqa: E402
from channel_tui.options import AppOptions  # noqa: E402

QUESTION = "What is the capital of France?"
SIZE = (100, 30)


async def take(out: Path) -> None:
    with tempfile.TemporaryDirectory() as home:
        app = ChannelApp(AppOptions(data_dir=Path(home) / "data",
                                    config_dir=Path(home) / "config"))
        async with app.run_test(size=SIZE) as pilot:
            deadline = time.monotonic() + 300
            while not app.chat.session_open:
                assert time.monotonic() < deadline, "the session did not open"
                await pilot.pause(0.1)
            app.chat.prompt.load_text(QUESTION)
            await pilot.press("enter")
            await pilot.pause(0.5)
            while app.chat.busy:
                assert time.monotonic() < deadline, "the reply did not end"
                await pilot.pause(0.1)
            app.chat.prompt.cursor_blink = False
            await pilot.pause(0.5)
            app.save_screenshot(filename=out.name, path=str(out.parent))


if __name__ == "__main__":
    target = ROOT / "docs" / "screenshot.svg"
    asyncio.run(take(target))
    print(f"wrote {target}")
