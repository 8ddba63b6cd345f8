"""The app's preferences: `preferences.json` in the platform's config directory
(platformdirs' user_config_dir("channel"); XDG_CONFIG_HOME moves it on Linux, --config-dir
or AppOptions.config_dir anywhere). Unlike a session's settings they belong to the person,
not to a conversation: the theme, and the session each data directory last had open, which
`channel` without --session returns to.

The file is written atomically (settings.write_json_atomic). A hand-edited file with a bad
value loses that value only, with one line saying so; keys this version does not know are
kept as they were.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from engine.paths import APP_NAME, session_name_problem

from .settings import read_json_file, write_json_atomic

PREFERENCES_FILE = "preferences.json"


def default_config_dir() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME, appauthor=False))


@dataclass
class Preferences:
    theme: str | None = None  # a Textual theme's name; None: Textual's default
    # The data directory (resolved, as a string) -> the session last opened there.
    last_session: dict[str, str] = field(default_factory=dict)
    others: dict[str, object] = field(default_factory=dict)  # keys a newer version wrote

    def last_session_in(self, data_dir: Path) -> str | None:
        return self.last_session.get(_key(data_dir))

    def remember_session(self, data_dir: Path, name: str) -> bool:
        """Note `name` as the last session in `data_dir`; whether that changed anything."""
        if self.last_session.get(_key(data_dir)) == name:
            return False
        self.last_session[_key(data_dir)] = name
        return True

    def as_json(self) -> dict[str, object]:
        return {**self.others, "theme": self.theme, "last_session": dict(self.last_session)}


def load_preferences(config_dir: Path) -> tuple[Preferences, list[str]]:
    """The saved preferences (none saved: the defaults), and one line per value dropped."""
    path = config_dir / PREFERENCES_FILE
    raw, problem = read_json_file(path)
    if problem is not None:
        return Preferences(), [problem]
    if raw is None:
        return Preferences(), []
    if not isinstance(raw, dict):
        return Preferences(), [f"{path.name} does not hold a JSON object; using the defaults"]
    prefs = Preferences(others={k: v for k, v in raw.items()
                                if k not in ("theme", "last_session")})
    dropped: list[str] = []
    theme = raw.get("theme")
    if isinstance(theme, str) or theme is None:
        prefs.theme = theme
    else:
        dropped.append(f"{path.name}: theme must be a theme's name, got {theme!r}")
    sessions = raw.get("last_session", {})
    if not isinstance(sessions, dict):
        dropped.append(f"{path.name}: last_session must map data directories to sessions")
        sessions = {}
    for data_dir, name in sessions.items():
        if isinstance(name, str) and session_name_problem(name) is None:
            prefs.last_session[data_dir] = name
        else:
            dropped.append(f"{path.name}: last_session for {data_dir}: not a session name, "
                           f"{name!r}")
    return prefs, dropped


def save_preferences(config_dir: Path, prefs: Preferences) -> Path:
    """Write the preferences atomically, creating the config directory (private) if need
    be; OSError when it cannot be written."""
    config_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = config_dir / PREFERENCES_FILE
    write_json_atomic(path, prefs.as_json())
    return path


def _key(data_dir: Path) -> str:
    return str(Path(data_dir).expanduser().resolve())


def session_to_open(asked: str | None, data_dir: Path, prefs: Preferences) -> str:
    """--session; else the session this data directory last had open, if it is still
    there (renamed or deleted since: not); else "default"."""
    from engine.session.manage import session_exists

    if asked is not None:
        return asked
    last = prefs.last_session_in(data_dir)
    return last if last is not None and session_exists(data_dir, last) else "default"
