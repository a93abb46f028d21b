"""The swap of claude-mem's search server for memsync's in Claude Code: the settings edit on its own
(every other key kept, nothing written on a bad file), and ``memsync claude-code swap`` /
``restore`` end to end with the real ``claude`` CLI (installed by ``make test``) on a temporary
HOME where claude-mem's published plugin is installed from a local marketplace."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memsync.config.claude_code import (
    CLAUDE_MEM_SERVER,
    ClaudeSettingsError,
    allow_claude_mem_search,
    deny_claude_mem_search,
    settings_path,
)
from scripts.real_claude_mem import CLAUDE_CODE, NO_TELEMETRY, WORKER_SCRIPT
from tests.conftest import make_db, mixed_records

MEMSYNC = str(Path(sys.executable).parent / "memsync")


# -- the settings edit ---------------------------------------------------------------------------
def test_deny_and_allow_keep_every_other_key(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    theirs = {"enabledPlugins": {"claude-mem@thedotmack": True}, "deniedMcpServers": [{"serverName": "other"}],
              "permissions": {"allow": ["Bash(ls)"]}}
    path.write_text(json.dumps(theirs))
    path.chmod(0o640)
    assert deny_claude_mem_search(path) is True
    assert deny_claude_mem_search(path) is False  # idempotent
    data = json.loads(path.read_text())
    assert data["deniedMcpServers"] == [{"serverName": "other"}, {"serverName": CLAUDE_MEM_SERVER}]
    assert {k: v for k, v in data.items() if k != "deniedMcpServers"} == {
        k: v for k, v in theirs.items() if k != "deniedMcpServers"}
    assert path.stat().st_mode & 0o777 == 0o640
    assert allow_claude_mem_search(path) is True and allow_claude_mem_search(path) is False
    assert json.loads(path.read_text()) == theirs
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]  # no temporary file left


def test_allow_removes_the_key_it_added(tmp_path: Path) -> None:
    path = tmp_path / "claude" / "settings.json"
    assert deny_claude_mem_search(path) is True  # no file yet: created, private
    assert path.stat().st_mode & 0o777 == 0o600
    assert allow_claude_mem_search(path) is True
    assert json.loads(path.read_text()) == {}


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"deniedMcpServers": "plugin:claude-mem:mcp-search, x"}'])
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
def claude_env(home: Path) -> dict[str, str]:
    return {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), **NO_TELEMETRY}


def claude(home: Path, *args: str, cwd: Path) -> str:
    done = subprocess.run([str(CLAUDE_CODE), *args], env=claude_env(home), cwd=cwd, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
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


@pytest.mark.slow
def test_swap_and_restore_with_the_real_claude_code(tmp_path: Path) -> None:
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
    swap = subprocess.run([MEMSYNC, "claude-code", "swap", "--claude", str(CLAUDE_CODE), "--db", str(db)], env=env,
                          cwd=project, capture_output=True, text=True, timeout=180)
    assert swap.returncode == 0, swap.stdout + swap.stderr
    assert servers(claude(home, "mcp", "list", cwd=project)) == {"memsync": "Connected"}
    details = claude(home, "plugin", "details", "claude-mem@thedotmack", cwd=project)
    assert "Hooks (7)" in details, details  # the plugin's hooks stay: it still records memory
    registered = claude(home, "mcp", "get", "memsync", cwd=project)
    assert "--profile claude-mem" in registered and f"MEMSYNC_DB={db}" in registered, registered

    restore = subprocess.run([MEMSYNC, "claude-code", "restore", "--claude", str(CLAUDE_CODE)], env=env, cwd=project,
                             capture_output=True, text=True, timeout=180)
    assert restore.returncode == 0, restore.stdout + restore.stderr
    assert servers(claude(home, "mcp", "list", cwd=project)) == {CLAUDE_MEM_SERVER: "Connected"}
    assert json.loads((home / ".claude" / "settings.json").read_text()).get("deniedMcpServers") is None


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
    assert lines[2] == f"{settings}: deniedMcpServers entry for {CLAUDE_MEM_SERVER} would be added"
    assert settings.read_text() == '{"enabledPlugins": {"claude-mem@thedotmack": true}}'


def test_without_claude_code_it_says_how_to_get_it(tmp_path: Path) -> None:
    done = subprocess.run([MEMSYNC, "claude-code", "restore", "--claude", "no-such-claude"],
                          env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert "'no-such-claude' was not found: install Claude Code, or pass --claude PATH" in done.stderr
    assert not (tmp_path / ".claude").exists()
