"""The system prompt new sessions start from, kept in `<data dir>/new-session.json`.

A session's own system prompt is its stream's first line, pinned at the head of its ring:
every K/V after it was computed with it in view, so it never changes in place. A new one
goes to a fork of the session (replayed under it: engine/session/fork.py) or to the sessions
made from now on, which start from the prompt saved here (blank: the model template's own).
"""

from __future__ import annotations

from pathlib import Path

from engine.paths import SessionFiles
from engine.process.protocol import DEFAULT_MAX_MESSAGE_BYTES, text_problem

from .settings import read_json_file, write_json_atomic

FILE_NAME = "new-session.json"
KEY = "system_prompt"


def system_prompt_problem(text: str) -> str | None:
    """What the engine would refuse about `text` as a system prompt, in one line, or None."""
    problem = text_problem(text, DEFAULT_MAX_MESSAGE_BYTES)
    return f"the system prompt {problem}" if problem else None


def load_new_session_prompt(data_dir: Path) -> tuple[str, str | None]:
    """The prompt new sessions start from ('' for the template's own), and what was wrong
    with the file, if anything (then '')."""
    raw, problem = read_json_file(Path(data_dir) / FILE_NAME)
    if problem is not None or raw is None:
        return "", problem
    text = raw.get(KEY, "") if isinstance(raw, dict) else None
    if not isinstance(text, str):
        return "", f"{FILE_NAME}: {KEY} is not a text; new sessions use the model's own"
    if (problem := system_prompt_problem(text)) is not None:
        return "", f"{FILE_NAME}: {problem}; new sessions use the model's own"
    return text, None


def save_new_session_prompt(data_dir: Path, text: str) -> None:
    """Save the prompt for new sessions ('' for the template's own); OSError when the data
    directory refuses, ValueError for a text the engine would refuse."""
    if (problem := system_prompt_problem(text)) is not None:
        raise ValueError(problem)
    write_json_atomic(Path(data_dir) / FILE_NAME, {KEY: text})


def is_new_session(data_dir: Path, name: str) -> bool:
    """Whether `name` has no conversation yet (its first open writes the system prompt)."""
    return not SessionFiles(Path(data_dir), name).stream.exists()
