"""The per-prompt memory hook in Claude Code's settings: the ``UserPromptSubmit`` entry that
``memsync claude-code swap`` adds, how memsync's hook is told from the user's own, and claude-mem's
own per-prompt injection beside it.

Claude Code runs a command hook through a shell, in a new process for every prompt, with the
event's JSON on stdin, and adds what the command prints (``hookSpecificOutput.additionalContext``)
to the prompt. The entry swap adds to ``hooks.UserPromptSubmit``::

    {"hooks": [{"type": "command", "timeout": 5,
                "command": "/abs/.venv/bin/memsync claude-code inject --data-dir /abs/data [--db …] [--config …]"}]}

The command names the memsync executable by its absolute path (Claude Code's hooks do not see the
virtualenv on PATH) and the data directory always, so the client finds the running worker's socket
without loading memsync's settings; the database and the settings file follow the rule of swap's
MCP registration (passed on when set explicitly, or the demo's). Each word is quoted for a POSIX
shell. ``timeout`` is Claude Code's own limit for the hook, a backstop only: the client gives up on
a silent worker long before it.

Beside it swap adds the same command to ``hooks.SessionStart`` with the matcher ``compact``
(:func:`compact_entry`): after Claude Code compacts a conversation, the memories injected in that
session may be injected again.

Unix sockets carry the channel, so on Windows (``sys.platform == "win32"``) no hook is installed.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memsync.config.claude_code.settings_file import ClaudeSettingsError, read_settings
from memsync.config.claude_mem.user_settings import SETTINGS_FILE, claude_mem_setting, data_dir_choice
from memsync.config.inject_channel import COMPACT_EVENT, COMPACT_SOURCE

HOOK_EVENT = "UserPromptSubmit"
HOOK_AT = ("hooks", HOOK_EVENT)  # the list in Claude Code's settings that the entry goes into
# Beside it, the same command on a compaction (SessionStart, matcher "compact"): the worker forgets
# what it injected in the session, whose conversation is now a summary (config.inject_channel).
COMPACT_AT = ("hooks", COMPACT_EVENT)
INJECT_ARGS = ("claude-code", "inject")  # the hook client's subcommand
# Claude Code's limit for one run of the hook, in seconds (its `timeout`, default 60 for a command
# hook). A backstop: the client itself gives up after 1 s; 5 s leaves room for a cold interpreter.
HOOK_TIMEOUT_S = 5
SEMANTIC_INJECT_KEY = "CLAUDE_MEM_SEMANTIC_INJECT"  # claude-mem 13.25.3's own per-prompt injection (off by default)
UNSUPPORTED_PLATFORM = "win32"


def hook_supported(platform: str | None = None) -> bool:
    """Whether the hook can run here: not on Windows, where the unix socket it talks over is missing."""
    return (sys.platform if platform is None else platform) != UNSUPPORTED_PLATFORM


@dataclass(frozen=True, slots=True)
class InjectTarget:
    """What a hook's command line names: the data directory whose worker answers, and the database
    and memsync settings file when they were passed on."""

    data_dir: Path
    db: Path | None = None
    config: Path | None = None


def inject_command(memsync: Path, target: InjectTarget) -> str:
    """The hook's command line for a shell: ``memsync claude-code inject --data-dir …``, every path
    absolute (the hook runs in the session's folder) and quoted."""
    args = [os.path.abspath(memsync), *INJECT_ARGS, "--data-dir", os.path.abspath(target.data_dir)]
    if target.db is not None:
        args += ["--db", os.path.abspath(target.db)]
    if target.config is not None:
        args += ["--config", os.path.abspath(target.config)]
    return shlex.join(args)


def hook_entry(command: str) -> dict[str, Any]:
    """The entry swap adds to ``hooks.UserPromptSubmit`` (no matcher: Claude Code runs every
    ``UserPromptSubmit`` hook on every prompt)."""
    return {"hooks": [{"type": "command", "command": command, "timeout": HOOK_TIMEOUT_S}]}


def compact_entry(hook: Mapping[str, Any]) -> dict[str, Any]:
    """The entry swap adds to ``hooks.SessionStart`` beside ``hook`` (its ``UserPromptSubmit``
    entry): the same command, run only when Claude Code compacts a conversation (matcher
    ``compact``; not at startup, resume or ``/clear``, which starts a new session id)."""
    return {"matcher": COMPACT_SOURCE, **hook}


def parse_inject_command(command: object) -> InjectTarget | None:
    """The target of a memsync hook command line (a ``memsync`` executable running ``claude-code
    inject --data-dir …``), else None."""
    if not isinstance(command, str):
        return None
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    if len(argv) < 3 or not Path(argv[0]).name.startswith("memsync") or tuple(argv[1:3]) != INJECT_ARGS:
        return None
    options: dict[str, str] = {}
    rest = argv[3:]
    for flag, value in zip(rest[::2], rest[1::2], strict=False):
        options[flag] = value
    if "--data-dir" not in options:
        return None
    db, config = options.get("--db"), options.get("--config")
    return InjectTarget(Path(options["--data-dir"]), Path(db) if db else None, Path(config) if config else None)


def _commands(entry: object) -> list[object]:
    hooks = entry.get("hooks") if isinstance(entry, dict) else None
    return [h.get("command") for h in hooks if isinstance(h, dict)] if isinstance(hooks, list) else []


def is_memsync_entry(entry: object) -> bool:
    """Whether a ``UserPromptSubmit`` entry runs memsync's hook (and nothing else)."""
    commands = _commands(entry)
    return bool(commands) and all(parse_inject_command(c) is not None for c in commands)


def inject_targets(data: Mapping[str, Any], at: tuple[str, str] = HOOK_AT) -> list[InjectTarget]:
    """The targets of every memsync hook command in a settings document's ``hooks.UserPromptSubmit``
    (``at``: another event's list; for :data:`COMPACT_AT`, only entries matching ``compact``)."""
    hooks = data.get("hooks")
    entries = hooks.get(at[1]) if isinstance(hooks, dict) else None
    if not isinstance(entries, list):
        return []
    if at == COMPACT_AT:
        entries = [e for e in entries if isinstance(e, dict) and e.get("matcher") == COMPACT_SOURCE]
    found = (parse_inject_command(c) for entry in entries for c in _commands(entry))
    return [t for t in found if t is not None]


def hook_installed(settings_file: Path, data_dir: Path | None = None) -> bool:
    """Whether Claude Code's settings file holds memsync's ``UserPromptSubmit`` hook (for the data
    directory ``data_dir`` when given, compared as absolute paths). False for a file that is
    missing or cannot be read (``memsync status`` says it, never fails on it)."""
    try:
        data = read_settings(settings_file)
    except ClaudeSettingsError:
        return False
    return hook_in(data, data_dir)


def hook_in(data: Mapping[str, Any], data_dir: Path | None = None, at: tuple[str, str] = HOOK_AT) -> bool:
    """Whether a settings document holds memsync's ``UserPromptSubmit`` hook (``at``: its compaction
    entry) for ``data_dir`` when given, compared as absolute paths."""
    want = None if data_dir is None else os.path.abspath(data_dir)
    return any(want is None or os.path.abspath(t.data_dir) == want for t in inject_targets(data, at))


def claude_mem_injection(claude_settings: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> str | None:
    """Where claude-mem's own per-prompt injection (``CLAUDE_MEM_SEMANTIC_INJECT``) is turned on, as
    a phrase naming the place to turn it off, or None when it is off. Its hook reads the variable
    from its environment, which Claude Code's settings ``env`` sets for every hook, and else from
    claude-mem's settings file (``claude_mem_setting``: the same order as 13.25.3's
    SettingsDefaultsManager); only ``true`` (any case) turns it on."""
    env = dict(os.environ if environ is None else environ)
    session_env = claude_settings.get("env")
    if isinstance(session_env, dict):
        env.update({k: str(v) for k, v in session_env.items()})  # Claude Code sets them for its hooks
    if claude_mem_setting(SEMANTIC_INJECT_KEY, "false", env).strip().lower() != "true":
        return None
    if isinstance(session_env, dict) and SEMANTIC_INJECT_KEY in session_env:
        return f"the env object of Claude Code's settings file: set {SEMANTIC_INJECT_KEY} to \"false\" there"
    if SEMANTIC_INJECT_KEY in env:
        return f"the environment Claude Code starts in: unset {SEMANTIC_INJECT_KEY} (or set it to false)"
    return (f"claude-mem's settings file {data_dir_choice(env).path / SETTINGS_FILE}: "
            f"set \"{SEMANTIC_INJECT_KEY}\": \"false\" there")
