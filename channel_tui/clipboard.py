"""Copying text out of the app, with a toast that says what actually happened.

A terminal takes a copy through OSC 52, and never says whether it did (macOS Terminal and
tmux without `set-clipboard on` drop it). So the app also hands the text to the desktop's
clipboard command where there is one (wl-copy, xclip, xsel, pbcopy, clip.exe), which does
answer; where there is none, it writes the text to a file in the data directory as well, and
the toast names the file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

COPY_FILE = "copied.txt"
COMMAND_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class CopyResult:
    message: str  # the toast
    confirmed: bool  # the desktop clipboard took it (not only the terminal, maybe)


def clipboard_commands(env: Mapping[str, str], platform: str = sys.platform) -> list[list[str]]:
    """The clipboard commands this desktop has, most likely first."""
    candidates: list[list[str]] = []
    if platform == "darwin":
        candidates.append(["pbcopy"])
    if env.get("WAYLAND_DISPLAY"):
        candidates.append(["wl-copy"])
    if env.get("DISPLAY"):
        candidates += [["xclip", "-selection", "clipboard"], ["xsel", "--clipboard", "--input"]]
    if env.get("WSL_DISTRO_NAME"):
        candidates.append(["clip.exe"])
    return [c for c in candidates if shutil.which(c[0])]


def _desktop_copy(text: str, env: Mapping[str, str]) -> bool:
    for command in clipboard_commands(env):
        try:
            done = subprocess.run(command, input=text.encode("utf-8"), timeout=COMMAND_TIMEOUT_S,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return True
    return False


def _write_copy(text: str, data_dir: Path) -> Path:
    path = Path(data_dir) / COPY_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def copy_text(send_osc52, text: str, what: str, data_dir: Path,
              env: Mapping[str, str] | None = None) -> CopyResult:
    """Copy `text` (described as `what`, e.g. 'the last reply'): through the terminal by
    `send_osc52(text)` (App.copy_to_clipboard), and the desktop's clipboard or a file."""
    env = os.environ if env is None else env
    send_osc52(text)
    size = f"{len(text):,} characters"
    if _desktop_copy(text, env):
        return CopyResult(f"Copied {what} ({size})", True)
    try:
        path = _write_copy(text, data_dir)
    except OSError as exc:
        return CopyResult(f"Sent {what} ({size}) to the terminal's clipboard; it cannot say "
                          f"whether it took it, and no copy could be saved ({exc.strerror})",
                          False)
    return CopyResult(f"Sent {what} ({size}) to the terminal's clipboard (OSC 52); if it "
                      f"did not arrive, it is also in {path}", False)
