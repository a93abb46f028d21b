"""The swap of claude-mem's search server for memsync's in Claude Code: the settings edit on its own
(every other key kept, nothing written on a bad file), and ``memsync claude-code swap`` /
``restore`` end to end with the real ``claude`` CLI (installed by ``make test``) on a temporary
HOME where claude-mem's published plugin is installed from a local marketplace."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memsync.config.claude_code import (
    CLAUDE_MEM_SERVER,
    DENY_RULES,
    SEARCH_TOOLS,
    ClaudeSettingsError,
    allow_claude_mem_search,
    deny_claude_mem_search,
    settings_path,
)
from scripts.real_claude_mem import CLAUDE_CODE, NO_TELEMETRY, WORKER_SCRIPT
from tests.conftest import free_port, make_db, mixed_records
from tests.upstream.model_api import ModelApi, model_api

MEMSYNC = str(Path(sys.executable).parent / "memsync")
# claude-mem 13.25.3's MCP tools (tests/servers/test_claude_mem_profile.py checks its server lists 15)
CLAUDE_MEM_TOOLS = ("build_corpus", "get_observations", "get_tool_uses", "important_workflow", "list_corpora",
                    "prime_corpus", "query_corpus", "rebuild_corpus", "reprime_corpus", "search",
                    "session_start_context", "smart_outline", "smart_search", "smart_unfold", "timeline")


# -- the settings edit ---------------------------------------------------------------------------
def test_deny_and_allow_keep_every_other_key(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    theirs = {"enabledPlugins": {"claude-mem@thedotmack": True}, "deniedMcpServers": [{"serverName": "other"}],
              "permissions": {"allow": ["Bash(ls)"], "deny": ["Bash(rm:*)"]}}
    path.write_text(json.dumps(theirs))
    path.chmod(0o640)
    assert deny_claude_mem_search(path) is True
    assert deny_claude_mem_search(path) is False  # idempotent
    data = json.loads(path.read_text())
    assert data["permissions"]["deny"] == ["Bash(rm:*)", "mcp__plugin_claude-mem_mcp-search__search",
                                           "mcp__plugin_claude-mem_mcp-search__timeline",
                                           "mcp__plugin_claude-mem_mcp-search__get_observations"]
    assert data["permissions"]["allow"] == ["Bash(ls)"]
    assert {k: v for k, v in data.items() if k != "permissions"} == {k: v for k, v in theirs.items()
                                                                     if k != "permissions"}
    assert path.stat().st_mode & 0o777 == 0o640
    assert allow_claude_mem_search(path) is True and allow_claude_mem_search(path) is False
    assert json.loads(path.read_text()) == theirs
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]  # no temporary file left


def test_allow_removes_the_keys_it_added(tmp_path: Path) -> None:
    path = tmp_path / "claude" / "settings.json"
    assert deny_claude_mem_search(path) is True  # no file yet: created, private
    assert path.stat().st_mode & 0o777 == 0o600
    assert json.loads(path.read_text()) == {"permissions": {"deny": list(DENY_RULES)}}
    assert allow_claude_mem_search(path) is True
    assert json.loads(path.read_text()) == {}


@pytest.mark.parametrize("edit", [deny_claude_mem_search, allow_claude_mem_search])
def test_an_earlier_swaps_whole_server_entry_goes(tmp_path: Path, edit: Callable[[Path], bool]) -> None:
    """memsync's first swap denied claude-mem's whole server; swap and restore both take that back."""
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"deniedMcpServers": [{"serverName": "other"}, {"serverName": CLAUDE_MEM_SERVER}]}))
    assert edit(path) is True
    data = json.loads(path.read_text())
    assert data["deniedMcpServers"] == [{"serverName": "other"}]
    assert data.get("permissions", {}).get("deny", []) == (list(DENY_RULES) if edit is deny_claude_mem_search
                                                             else [])


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"permissions": ["mcp__x"]}',
                                  '{"permissions": {"deny": "mcp__plugin_claude-mem_mcp-search__search"}}'])
def test_a_settings_file_it_cannot_edit_is_left_as_it_is(tmp_path: Path, text: str) -> None:
    path = tmp_path / "settings.json"
    path.write_text(text)
    with pytest.raises(ClaudeSettingsError, match="fix it"):
        deny_claude_mem_search(path)
    assert path.read_text() == text


def test_claude_config_dir_is_honoured(tmp_path: Path) -> None:
    assert settings_path({"CLAUDE_CONFIG_DIR": str(tmp_path)}) == tmp_path / "settings.json"
    assert settings_path({}) == Path.home() / ".claude" / "settings.json"


# -- the real Claude Code ------------------------------------------------------------------------
def claude_env(home: Path, **extra: str) -> dict[str, str]:
    return {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), **NO_TELEMETRY, **extra}


def claude(home: Path, *args: str, cwd: Path, **extra: str) -> str:
    done = subprocess.run([str(CLAUDE_CODE), *args], env=claude_env(home, **extra), cwd=cwd, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def servers(listing: str) -> dict[str, str]:
    """``claude mcp list``: server name -> its health (Connected / Failed to connect)."""
    out = {}
    for line in listing.splitlines():
        name, sep, rest = line.partition(": ")
        if sep and ("✔" in rest or "✘" in rest):
            out[name] = "Connected" if "✔ Connected" in rest else rest.rsplit(" - ", 1)[-1]
    return out


def started_under(home: Path) -> list[int]:
    """Pids of the live processes whose environment has ``HOME=home``: every process Claude Code
    and claude-mem's plugin start in the test inherits it, and nothing else has it."""
    marker = f"HOME={home}".encode()
    pids = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if marker in environ.read_bytes().split(b"\0"):
                pids.append(int(environ.parent.name))
    return pids


CLAUDE_MEM_TOOL = "mcp__plugin_claude-mem_mcp-search__"  # how the model sees claude-mem's tools
MEMSYNC_TOOL = "mcp__memsync__"


def agent_tools(home: Path, project: Path, api: ModelApi, worker_port: int) -> dict[str, dict[str, Any]]:
    """The MCP tools a Claude Code session gives the model (name -> input schema): one ``claude -p``
    turn against the stand-in model API, which records the tool list it is sent. claude-mem's
    MCP server gets a worker port of its own (it tries to start a worker when none answers).

    ``claude -p`` connects MCP servers in the background and sends the first turn with those
    connected by then; ``MCP_CONNECTION_NONBLOCKING=0`` (read by Claude Code's connect step)
    makes it wait for all of them, so the list does not depend on which server started first."""
    api.requests.clear()
    answer = claude(home, "-p", "hello", cwd=project, ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="sk-ant-test",
                    CLAUDE_MEM_WORKER_PORT=str(worker_port), MCP_CONNECTION_NONBLOCKING="0")
    assert answer.strip() == "ok", answer
    return {name: schema for name, schema in api.tools().items() if name.startswith("mcp__")}


@pytest.mark.slow
def test_swap_and_restore_with_the_real_claude_code(tmp_path: Path) -> None:
    """What the agent sees, before, after swap and after restore: the tool list a real Claude Code
    session sends the model, with claude-mem's published plugin installed."""
    assert CLAUDE_CODE.exists(), f"{CLAUDE_CODE} is missing: `make test` installs Claude Code's CLI there"
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    # claude-mem's published plugin (the npm package's plugin/ folder), from a local marketplace.
    market = tmp_path / "marketplace"
    shutil.copytree(WORKER_SCRIPT.parents[1], market / "plugin")
    (market / ".claude-plugin").mkdir()
    (market / ".claude-plugin" / "marketplace.json").write_text(json.dumps({
        "name": "thedotmack", "owner": {"name": "test"},
        "plugins": [{"name": "claude-mem", "source": "./plugin", "description": "claude-mem from npm"}]}))
    claude(home, "plugin", "marketplace", "add", str(market), cwd=project)
    claude(home, "plugin", "install", "claude-mem@thedotmack", cwd=project)
    assert servers(claude(home, "mcp", "list", cwd=project)) == {CLAUDE_MEM_SERVER: "Connected"}
    db = make_db(tmp_path / "claude-mem.db", mixed_records(3))
    env = {**claude_env(home), "MEMSYNC_DATA_DIR": str(tmp_path / "data")}
    try:
        with model_api() as api:
            port = free_port()
            before = agent_tools(home, project, api, port)
            assert sorted(before) == sorted(CLAUDE_MEM_TOOL + t for t in CLAUDE_MEM_TOOLS)

            swap = subprocess.run([MEMSYNC, "claude-code", "swap", "--claude", str(CLAUDE_CODE), "--db", str(db)],
                                  env=env, cwd=project, capture_output=True, text=True, timeout=180)
            assert swap.returncode == 0, swap.stdout + swap.stderr
            # claude-mem's server stays on (its other tools with it); memsync's is added.
            assert servers(claude(home, "mcp", "list", cwd=project)) == {CLAUDE_MEM_SERVER: "Connected",
                                                                         "memsync": "Connected"}
            after = agent_tools(home, project, api, port)
            assert sorted(after) == sorted([*(MEMSYNC_TOOL + t for t in SEARCH_TOOLS),
                                            *(CLAUDE_MEM_TOOL + t for t in CLAUDE_MEM_TOOLS if t not in SEARCH_TOOLS)])
            for tool in SEARCH_TOOLS:  # the agent is given the parameters the skill teaches
                mine, theirs = after[MEMSYNC_TOOL + tool], before[CLAUDE_MEM_TOOL + tool]
                assert set(mine["properties"]) == set(theirs["properties"]), tool
                assert mine.get("required", []) == theirs.get("required", []), tool
            details = claude(home, "plugin", "details", "claude-mem@thedotmack", cwd=project)
            assert "Hooks (7)" in details, details  # the plugin's hooks stay: it still records memory
            registered = claude(home, "mcp", "get", "memsync", cwd=project)
            assert "--profile claude-mem" in registered and f"MEMSYNC_DB={db}" in registered, registered

            restore = subprocess.run([MEMSYNC, "claude-code", "restore", "--claude", str(CLAUDE_CODE)], env=env,
                                     cwd=project, capture_output=True, text=True, timeout=180)
            assert restore.returncode == 0, restore.stdout + restore.stderr
            assert sorted(agent_tools(home, project, api, port)) == sorted(before)
        assert servers(claude(home, "mcp", "list", cwd=project)) == {CLAUDE_MEM_SERVER: "Connected"}
        assert json.loads((home / ".claude" / "settings.json").read_text()).get("permissions") is None
    finally:  # anything the plugin's hooks or server started (a worker it auto-starts outlives claude)
        for pid in started_under(home):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert not started_under(home)


def test_a_dry_run_prints_the_steps_and_changes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    settings = home / ".claude" / "settings.json"
    settings.write_text('{"enabledPlugins": {"claude-mem@thedotmack": true}}')
    db = make_db(tmp_path / "claude-mem.db", mixed_records(1))
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    done = subprocess.run([MEMSYNC, "claude-code", "swap", "--dry-run", "--claude", sys.executable, "--db", str(db)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"$ {sys.executable} mcp remove --scope user memsync"
    assert lines[1].startswith(f"$ {sys.executable} mcp add --scope user memsync -e MEMSYNC_DB={db} -- ")
    assert lines[1].endswith(" mcp --profile claude-mem")
    assert lines[2] == f"{settings}: permissions.deny rules {', '.join(DENY_RULES)}: would be added"
    assert settings.read_text() == '{"enabledPlugins": {"claude-mem@thedotmack": true}}'


def test_without_claude_code_it_says_how_to_get_it(tmp_path: Path) -> None:
    done = subprocess.run([MEMSYNC, "claude-code", "restore", "--claude", "no-such-claude"],
                          env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert "'no-such-claude' was not found: install Claude Code, or pass --claude PATH" in done.stderr
    assert not (tmp_path / ".claude").exists()
