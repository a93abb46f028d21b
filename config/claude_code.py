"""Claude Code's side of the swap: where its settings are, what claude-mem's search server is called
there, and the one change memsync makes to them.

claude-mem's plugin brings its hooks (which record memory) and one MCP server, ``mcp-search``,
which Claude Code names ``plugin:claude-mem:mcp-search``. To give the agent memsync's answers
behind the same three tools, ``memsync claude-code swap`` registers ``memsync mcp --profile
claude-mem`` with ``claude mcp add`` and denies that one server in the user's Claude Code
settings (``deniedMcpServers``, a setting Claude Code documents for users to deny servers for
themselves). The plugin stays enabled, so its hooks, context injection and viewer keep working;
only its search server is left out. ``restore`` undoes both. Checked against the real ``claude``
CLI (docs/claude-mem.md names the version): with the entry, ``claude mcp list`` no longer lists
the plugin's server and ``claude plugin details`` still counts its hooks.

The edit keeps every other key of the file as it is, writes a new file and renames it over the old
one (never a half-written settings file), and refuses a file that is not a JSON object rather
than overwrite it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CLAUDE_MEM_SERVER = "plugin:claude-mem:mcp-search"  # claude-mem's plugin server, as Claude Code names it
DENY_KEY = "deniedMcpServers"
SERVER_NAME = "memsync"  # the name memsync registers under (its tools: mcp__memsync__search, ...)


class ClaudeSettingsError(RuntimeError):
    """Claude Code's settings file cannot be read as a JSON object: fix or move it, then run again."""


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """Claude Code's configuration directory: ``CLAUDE_CONFIG_DIR``, else ``~/.claude`` (HOME of
    ``env``); the one rule for memsync's swap and for finding the installed claude-mem plugin."""
    env = os.environ if env is None else env
    value = env.get("CLAUDE_CONFIG_DIR", "").strip()
    return Path(value).expanduser() if value else Path(env.get("HOME") or Path.home()) / ".claude"


def settings_path(env: Mapping[str, str] | None = None) -> Path:
    """The user's Claude Code settings file (``settings.json`` in :func:`config_dir`)."""
    return config_dir(env) / "settings.json"


def read_settings(path: Path) -> dict[str, Any]:
    """The settings as a dict ({} when the file does not exist)."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError) as exc:
        raise ClaudeSettingsError(f"{path} is not readable JSON ({exc}); fix it, then run again") from None
    if not isinstance(data, dict):
        raise ClaudeSettingsError(f"{path} does not hold a JSON object; fix it, then run again")
    return data


def write_settings(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` whole or not at all (a temporary file renamed over it), keeping the
    file's permissions."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    fd, tmp = tempfile.mkstemp(prefix=".settings-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=2, ensure_ascii=False)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _entry(value: Any) -> bool:
    return isinstance(value, dict) and value.get("serverName") == CLAUDE_MEM_SERVER


def is_denied(data: dict[str, Any]) -> bool:
    """Whether the settings deny claude-mem's search server."""
    denied = data.get(DENY_KEY)
    return isinstance(denied, list) and any(_entry(v) for v in denied)


def deny_claude_mem_search(path: Path) -> bool:
    """Add claude-mem's search server to the settings' ``deniedMcpServers``; False when it was there."""
    data = read_settings(path)
    if is_denied(data):
        return False
    denied = data.get(DENY_KEY)
    if denied is not None and not isinstance(denied, list):
        raise ClaudeSettingsError(f"{DENY_KEY} in {path} is not a list; fix it, then run again")
    data[DENY_KEY] = [*(denied or []), {"serverName": CLAUDE_MEM_SERVER}]
    write_settings(path, data)
    return True


def allow_claude_mem_search(path: Path) -> bool:
    """Remove memsync's entry from ``deniedMcpServers`` (the key too when it is left empty); False when
    there was none."""
    data = read_settings(path)
    if not is_denied(data):
        return False
    kept = [v for v in data[DENY_KEY] if not _entry(v)]
    if kept:
        data[DENY_KEY] = kept
    else:
        del data[DENY_KEY]
    write_settings(path, data)
    return True
