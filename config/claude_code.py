"""Claude Code's side of the swap: where its settings are, what claude-mem's search tools are called
there, and the one change memsync makes to them.

claude-mem's plugin brings its hooks (which record memory) and one MCP server, ``mcp-search``,
which Claude Code names ``plugin:claude-mem:mcp-search`` and whose tools it gives the model as
``mcp__plugin_claude-mem_mcp-search__<tool>``. To give the agent memsync's answers behind the same
three tools, ``memsync claude-code swap`` registers ``memsync mcp --profile claude-mem`` with
``claude mcp add`` and adds deny rules for claude-mem's ``search``, ``timeline`` and
``get_observations`` to the user's Claude Code settings (``permissions.deny``). Claude Code leaves
a tool with such a rule out of the tool list it sends the model, so the agent sees memsync's three
tools and claude-mem's twelve others; the plugin stays enabled, with its hooks, context injection
and viewer. ``restore`` undoes both. Checked against the real ``claude`` CLI (docs/claude-mem.md
names the version) through the tool list its ``claude -p`` sends to a stand-in model API.

An earlier memsync (0.x, issue 27's first swap) denied claude-mem's whole server instead
(``deniedMcpServers``); ``swap`` and ``restore`` remove that entry, so the twelve other tools come
back.

The edit keeps every other key of the file as it is, writes a new file and renames it over the old
one (never a half-written settings file), and refuses a file whose parts it must change are not
what Claude Code reads (not a JSON object, ``permissions`` not an object, ``deny`` not a list)
rather than overwrite it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memsync.config.errors import ConfigError

CLAUDE_MEM_SERVER = "plugin:claude-mem:mcp-search"  # claude-mem's plugin server, as Claude Code names it
SEARCH_TOOLS = ("search", "timeline", "get_observations")  # the three its mem-search skill teaches
# Claude Code's names for them: mcp__ + the server name with ':' as '_' + __ + the tool.
DENY_RULES = tuple(f"mcp__{CLAUDE_MEM_SERVER.replace(':', '_')}__{tool}" for tool in SEARCH_TOOLS)
OLD_DENY_KEY = "deniedMcpServers"  # what memsync's first swap used: claude-mem's whole server denied
SERVER_NAME = "memsync"  # the name memsync registers under (its tools: mcp__memsync__search, ...)


class ClaudeSettingsError(ConfigError):
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


def _old_entry(value: Any) -> bool:
    return isinstance(value, dict) and value.get("serverName") == CLAUDE_MEM_SERVER


def denied_rules(data: dict[str, Any]) -> list[str]:
    """Which of :data:`DENY_RULES` the settings hold."""
    permissions = data.get("permissions")
    deny = permissions.get("deny") if isinstance(permissions, dict) else None
    return [r for r in DENY_RULES if isinstance(deny, list) and r in deny]


def denies_whole_server(data: dict[str, Any]) -> bool:
    """Whether the settings hold an earlier memsync swap's ``deniedMcpServers`` entry."""
    denied = data.get(OLD_DENY_KEY)
    return isinstance(denied, list) and any(_old_entry(v) for v in denied)


def _drop_whole_server_entry(data: dict[str, Any]) -> bool:
    if not denies_whole_server(data):
        return False
    kept = [v for v in data[OLD_DENY_KEY] if not _old_entry(v)]
    if kept:
        data[OLD_DENY_KEY] = kept
    else:
        del data[OLD_DENY_KEY]
    return True


def _deny_list(data: dict[str, Any], path: Path) -> list[Any]:
    """The settings' ``permissions.deny`` list (created empty), refusing other shapes."""
    permissions = data.setdefault("permissions", {})
    if not isinstance(permissions, dict):
        raise ClaudeSettingsError(f"permissions in {path} is not a JSON object; fix it, then run again")
    deny = permissions.setdefault("deny", [])
    if not isinstance(deny, list):
        raise ClaudeSettingsError(f"permissions.deny in {path} is not a list; fix it, then run again")
    return deny


def deny_claude_mem_search(path: Path) -> bool:
    """Add the deny rules of claude-mem's three search tools to the settings (and drop an earlier
    swap's whole-server entry); False when nothing had to change."""
    data = read_settings(path)
    before = json.dumps(data, sort_keys=True)
    deny = _deny_list(data, path)
    deny.extend(r for r in DENY_RULES if r not in deny)
    _drop_whole_server_entry(data)
    if json.dumps(data, sort_keys=True) == before:
        return False
    write_settings(path, data)
    return True


def allow_claude_mem_search(path: Path) -> bool:
    """Remove memsync's deny rules (``deny`` and ``permissions`` too when left empty) and an earlier
    swap's whole-server entry; False when there was none."""
    data = read_settings(path)
    dropped = _drop_whole_server_entry(data)
    if denied_rules(data):
        permissions = data["permissions"]
        permissions["deny"] = [r for r in permissions["deny"] if r not in DENY_RULES]
        if not permissions["deny"]:
            del permissions["deny"]
        if not permissions:
            del data["permissions"]
    elif not dropped:
        return False
    write_settings(path, data)
    return True
