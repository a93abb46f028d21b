"""claude-mem's own settings, read the way claude-mem reads them, so memsync honours a user's setup.

Where the database is (upstream ``src/shared/paths.ts``, ``resolveDataDir``): the
``CLAUDE_MEM_DATA_DIR`` environment variable, else ``CLAUDE_MEM_DATA_DIR`` in
``~/.claude-mem/settings.json`` (flat, or under an ``env`` object as older files have it), else
``~/.claude-mem``; a leading ``~`` is expanded; the file is ``claude-mem.db`` there. A missing or
unreadable settings file falls through to the default, as upstream's does.

Only read here, never written (upstream migrates the file in place; memsync never touches it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA_DIR_KEY = "CLAUDE_MEM_DATA_DIR"
DB_FILE = "claude-mem.db"
SETTINGS_FILE = "settings.json"
DEFAULT_DIR_RULE = "claude-mem's default directory (~/.claude-mem)"


@dataclass(frozen=True, slots=True)
class DataDirChoice:
    """claude-mem's data directory and the rule that chose it (said by ``memsync status``)."""

    path: Path
    rule: str

    @property
    def db(self) -> Path:
        """The database claude-mem writes in that directory."""
        return self.path / DB_FILE


def claude_mem_setting(key: str, default: str, environ: Mapping[str, str] | None = None) -> str:
    """One of claude-mem's settings as its ``SettingsDefaultsManager`` resolves it: the environment
    variable (set there even when empty), else the key in its data directory's ``settings.json``,
    else ``default``; an empty value means the default."""
    env = os.environ if environ is None else environ
    value = env[key] if key in env else read_settings_file(data_dir_choice(env).path / SETTINGS_FILE).get(key)
    return value or default


def default_worker_port() -> int:
    """claude-mem's default worker port (13.25.3's SettingsDefaultsManager: 37700 + uid % 100, so
    that users of one machine get different ports; 77 where there is no uid)."""
    uid = os.getuid() if hasattr(os, "getuid") else 77
    return 37700 + uid % 100


def _home(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("HOME") or Path.home())


def expand_home(value: str, environ: Mapping[str, str]) -> Path:
    """``~`` and ``~/...`` expanded as upstream's ``expandHome`` does (``~user`` is left alone)."""
    if value == "~":
        return _home(environ)
    if value.startswith("~/"):
        return _home(environ) / value[2:]
    return Path(value)


def read_settings_file(path: Path) -> dict[str, str]:
    """The string settings of a claude-mem ``settings.json`` (flat, or under ``env``); empty when
    the file is missing, unreadable or not a JSON object (upstream falls through to its defaults).
    Parsed once per version of the file (its time and size): every search and every look of the
    worker asks, and the file rarely changes."""
    try:
        st = path.stat()
    except OSError:
        return {}
    return dict(_parsed(str(path), st.st_mtime_ns, st.st_size))


@lru_cache(maxsize=8)
def _parsed(path: str, mtime_ns: int, size: int) -> tuple[tuple[str, str], ...]:
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8-sig"))  # -sig: upstream accepts a BOM
    except (OSError, ValueError):
        return ()
    if not isinstance(raw, dict):
        return ()
    nested = raw.get("env")
    flat: dict[object, object] = nested if isinstance(nested, dict) else raw
    return tuple((str(k), v) for k, v in flat.items() if isinstance(v, str))


def data_dir_choice(environ: Mapping[str, str] | None = None) -> DataDirChoice:
    """claude-mem's data directory, by upstream's rule (see the module docstring)."""
    env = os.environ if environ is None else environ
    if env.get(DATA_DIR_KEY):
        return DataDirChoice(expand_home(env[DATA_DIR_KEY], env), f"{DATA_DIR_KEY} in the environment")
    default = _home(env) / ".claude-mem"
    configured = read_settings_file(default / SETTINGS_FILE).get(DATA_DIR_KEY)
    if configured:
        return DataDirChoice(expand_home(configured, env), f"{DATA_DIR_KEY} in {default / SETTINGS_FILE}")
    return DataDirChoice(default, DEFAULT_DIR_RULE)
