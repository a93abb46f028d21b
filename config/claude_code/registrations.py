"""Claude Code's side of the swap: where its settings are, what claude-mem's search tools are called
there, and the changes memsync makes to them.

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

Swap records what it added (:mod:`memsync.config.claude_code.settings_file`: in the file, beside the
entries) and restore removes exactly that: a rule the user had written themselves is neither
recorded nor removed, and a restore with no swap recorded changes nothing. The record is a list of
values added to lists, so swap's other addition, the per-prompt memory hook in
``hooks.UserPromptSubmit`` and its compaction entry in ``hooks.SessionStart``
(:mod:`memsync.config.claude_code.hook`), is recorded and undone the same way;
it goes into this same file whatever ``--scope`` the MCP registration takes.

An earlier memsync (0.x, the first swap) denied claude-mem's whole server instead
(``deniedMcpServers``). Such an entry cannot be told from a user's own, so swap and restore leave
it and say so.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memsync.config.claude_code.hook import COMPACT_AT, HOOK_AT, compact_entry, inject_targets, is_memsync_entry
from memsync.config.claude_code.settings_file import (
    HOOKS_ELSEWHERE_REFUSED_SINCE,
    RECORD_KEY,
    RecordedEdit,
    Step,
    read_settings_file,
    record_misread_by_claude_code,
    same,
    settings_text,
    write_settings,
)

CLAUDE_MEM_SERVER = "plugin:claude-mem:mcp-search"  # claude-mem's plugin server, as Claude Code names it
SEARCH_TOOLS = ("search", "timeline", "get_observations")  # the three its mem-search skill teaches
# Claude Code's names for them: mcp__ + the server name with ':' as '_' + __ + the tool.
DENY_RULES = tuple(f"mcp__{CLAUDE_MEM_SERVER.replace(':', '_')}__{tool}" for tool in SEARCH_TOOLS)
OLD_DENY_KEY = "deniedMcpServers"  # what memsync's first swap used: claude-mem's whole server denied
SERVER_NAME = "memsync"  # the name memsync registers under (its tools: mcp__memsync__search, ...)
DENY_AT = ("permissions", "deny")  # where the deny rules go


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """Claude Code's configuration directory: ``CLAUDE_CONFIG_DIR``, else ``~/.claude`` (HOME of
    ``env``); the one rule for memsync's swap and for finding the installed claude-mem plugin."""
    env = os.environ if env is None else env
    value = env.get("CLAUDE_CONFIG_DIR", "").strip()
    return Path(value).expanduser() if value else Path(env.get("HOME") or Path.home()) / ".claude"


def settings_path(env: Mapping[str, str] | None = None) -> Path:
    """The user's Claude Code settings file (``settings.json`` in :func:`config_dir`)."""
    return config_dir(env) / "settings.json"


def _old_entry(value: Any) -> bool:
    return isinstance(value, dict) and value.get("serverName") == CLAUDE_MEM_SERVER


def denied_rules(data: dict[str, Any]) -> list[str]:
    """Which of :data:`DENY_RULES` the settings hold."""
    permissions = data.get("permissions")
    deny = permissions.get("deny") if isinstance(permissions, dict) else None
    return [r for r in DENY_RULES if isinstance(deny, list) and r in deny]


def denies_whole_server(data: dict[str, Any]) -> bool:
    """Whether ``deniedMcpServers`` denies claude-mem's whole server (as memsync's first swap did)."""
    denied = data.get(OLD_DENY_KEY)
    return isinstance(denied, list) and any(_old_entry(v) for v in denied)


@dataclass(frozen=True, slots=True)
class SettingsChange:
    """What swap or restore does to the settings file: its steps, notes on what it leaves as it is,
    and the file's new text (None when nothing changes: the file is not rewritten)."""

    path: Path
    steps: tuple[Step, ...]
    notes: tuple[str, ...]
    text: str | None


def _whole_server_note(path: Path, data: dict[str, Any]) -> list[str]:
    if not denies_whole_server(data):
        return []
    return [f"{path}: {OLD_DENY_KEY} denies claude-mem's whole server ({CLAUDE_MEM_SERVER}), which hides its other "
            "tools too; left as it is (memsync's first swap added such an entry: remove it if it is not yours)"]


def _change(path: Path, data: dict[str, Any], before: str, edit: RecordedEdit, notes: list[str],
            newline: bool) -> SettingsChange:
    after = settings_text(path, data, newline)
    return SettingsChange(path, tuple(edit.steps), tuple(notes), None if after == before else after)


def plan_swap(path: Path, hook: dict[str, Any] | None = None) -> SettingsChange:
    """Swap's edit, not written: the deny rules of claude-mem's three search tools added where they
    are missing, and the hook entry ``hook`` (``hook.hook_entry``; None: no hook) appended to
    ``hooks.UserPromptSubmit`` and its compaction entry (``hook.compact_entry``) to
    ``hooks.SessionStart``, each recorded. memsync's hook that an earlier swap recorded is
    replaced (another database, data directory or executable), never a hook the user wrote.
    Refuses (:class:`ClaudeSettingsError`) exactly as writing would."""
    data, newline = read_settings_file(path)
    before = settings_text(path, data, newline)
    edit = RecordedEdit(data, path)
    notes = ([f"{path}: rewrites swap's record ({RECORD_KEY}) as text where an earlier memsync wrote objects, "
              f"which Claude Code {HOOKS_ELSEWHERE_REFUSED_SINCE} and later take for misplaced hooks (they then "
              "apply nothing of the file)"] if record_misread_by_claude_code(data) else [])
    for rule in DENY_RULES:
        edit.add(DENY_AT, rule)
    if hook is not None:
        wanted = {HOOK_AT: hook, COMPACT_AT: compact_entry(hook)}
        for at, value in list(edit.added):
            if at in wanted and is_memsync_entry(value) and not same(value, wanted[at]):
                edit.withdraw(at, value)
        for at, entry in wanted.items():
            edit.add(at, entry)
    edit.finish()
    return _change(path, data, before, edit, [*notes, *_whole_server_note(path, data)], newline)


def plan_restore(path: Path) -> SettingsChange:
    """Restore's edit, not written: what swap recorded removed, and the record; nothing else."""
    data, newline = read_settings_file(path)
    before = settings_text(path, data, newline)
    edit = RecordedEdit(data, path)
    notes = []
    if not edit.recorded and denied_rules(data):
        notes.append(f"{path}: permissions.deny holds {', '.join(denied_rules(data))} with no record of a swap "
                     f"adding them ({RECORD_KEY}): left as they are")
    edit.undo()
    for at in (HOOK_AT, COMPACT_AT):
        if inject_targets(data, at):
            notes.append(f"{path}: {'.'.join(at)} still holds a memsync hook that no swap recorded adding: "
                         "left as it is")
    return _change(path, data, before, edit, [*notes, *_whole_server_note(path, data)], newline)


def apply_change(change: SettingsChange) -> bool:
    """Write a planned change; False when there was nothing to write."""
    if change.text is None:
        return False
    write_settings(change.path, change.text)
    return True


def deny_claude_mem_search(path: Path) -> bool:
    """Swap's edit, written; False when nothing had to change."""
    return apply_change(plan_swap(path))


def allow_claude_mem_search(path: Path) -> bool:
    """Restore's edit, written; False when nothing had to change."""
    return apply_change(plan_restore(path))


# -- memsync registered already: Claude Code's MCP scopes ------------------------------------------
# Claude Code's order when one name is registered at several scopes: local, then project, then user
# (its MCP documentation; checked with the real CLI's `claude mcp get`, which names the one it uses).
SCOPES = ("local", "project", "user")


@dataclass(frozen=True, slots=True)
class Registration:
    """One ``claude mcp add`` registration of a server: its scope, the file holding it, its command."""

    scope: str
    file: Path
    command: str


def claude_json_path(env: Mapping[str, str] | None = None) -> Path:
    """Where Claude Code keeps user and local registrations: ``.claude.json`` in ``CLAUDE_CONFIG_DIR``,
    else in HOME (beside ``~/.claude``, not in it)."""
    env = os.environ if env is None else env
    value = env.get("CLAUDE_CONFIG_DIR", "").strip()
    return (Path(value).expanduser() if value else Path(env.get("HOME") or Path.home())) / ".claude.json"


def project_dir(cwd: Path) -> Path:
    """The project a local registration belongs to: the git work tree holding ``cwd`` (what the
    real CLI keys ``projects`` by), else ``cwd``."""
    for folder in (cwd, *cwd.parents):
        if (folder / ".git").exists():
            return folder
    return cwd


def _json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # no file, or one Claude Code itself could not read: no registration in it
    return data if isinstance(data, dict) else {}


def _server(holder: Any, name: str) -> str | None:
    servers = holder.get("mcpServers") if isinstance(holder, dict) else None
    entry = servers.get(name) if isinstance(servers, dict) else None
    if not isinstance(entry, dict):
        return None
    args = entry.get("args")
    return " ".join(str(part) for part in [entry.get("command") or entry.get("url") or "?",
                                           *(args if isinstance(args, list) else [])])


def _nearest_mcp_json(name: str, cwd: Path) -> tuple[Path, str | None]:
    """The project registration of ``name``: the nearest ``.mcp.json`` holding it, from ``cwd`` up to
    the root (the real CLI reads every one on the way and the nearest wins; ``claude mcp add --scope
    project`` writes the one in ``cwd``)."""
    for folder in (cwd, *cwd.parents):
        command = _server(_json_object(folder / ".mcp.json"), name)
        if command is not None:
            return folder / ".mcp.json", command
    return cwd / ".mcp.json", None


def registrations(name: str, cwd: Path, env: Mapping[str, str] | None = None) -> list[Registration]:
    """Where ``name`` is registered for a Claude Code session started in ``cwd``, winner first
    (:data:`SCOPES`): local (``projects[<project>].mcpServers`` in :func:`claude_json_path`),
    project (the nearest ``.mcp.json`` holding it) and user (the top-level ``mcpServers``)."""
    project = project_dir(cwd)
    home_file = claude_json_path(env)
    data = _json_object(home_file)
    projects = data.get("projects")
    found = {"local": (home_file, _server(projects.get(str(project)) if isinstance(projects, dict) else None, name)),
             "project": _nearest_mcp_json(name, cwd),
             "user": (home_file, _server(data, name))}
    return [Registration(scope, file, command) for scope, (file, command) in found.items() if command is not None]


def winning_scope(existing: list[Registration], scope: str) -> str:
    """The scope whose registration Claude Code uses once ``scope`` holds one too."""
    return min({scope, *(r.scope for r in existing)}, key=SCOPES.index)
