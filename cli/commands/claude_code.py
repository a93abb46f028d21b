"""``memsync claude-code swap`` / ``restore``: memsync's answers behind claude-mem's search tools in
Claude Code, in one command, and back (:mod:`memsync.config.claude_code` owns Claude Code's side)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from memsync.commands.options import EXIT_USAGE, common_options, errors_as_exit, fail, settings_from
from memsync.config.claude_code import (
    CLAUDE_MEM_SERVER,
    DENY_RULES,
    SERVER_NAME,
    allow_claude_mem_search,
    denied_rules,
    denies_whole_server,
    deny_claude_mem_search,
    read_settings,
    settings_path,
)
from memsync.config.formats.database_owner import is_demo

CLAUDE_TIMEOUT = 60  # seconds for one `claude mcp` call (it answers in about a second)


def claude_option(func: Any) -> Any:
    """--claude, --scope and --dry-run, shared by swap and restore."""
    func = click.option("--dry-run", is_flag=True, help="Print what would be run and changed; change nothing.")(func)
    func = click.option("--scope", type=click.Choice(["user", "local", "project"]), default="user", show_default=True,
                        help="Where `claude mcp add` registers memsync (user: every project).")(func)
    return click.option("--claude", "claude_cmd", default="claude", show_default=True,
                        help="Claude Code's command (a name on PATH or a path).")(func)


def find_claude(name: str) -> str:
    """The ``claude`` executable's path, or exit 2 saying how to get it."""
    found = shutil.which(name)
    if found is None:
        fail(f"Claude Code's command {name!r} was not found: install Claude Code, or pass --claude PATH", EXIT_USAGE)
    return found


def run_claude(args: list[str], dry_run: bool, check: bool = True) -> bool:
    """Run one ``claude`` command (printed first); False when it failed and ``check`` is off."""
    click.echo(f"$ {shlex.join(args)}")
    if dry_run:
        return True
    done = subprocess.run(args, capture_output=True, text=True, timeout=CLAUDE_TIMEOUT, stdin=subprocess.DEVNULL)
    if done.returncode != 0 and check:
        fail(f"`{shlex.join(args[:3])}` failed ({done.returncode}): {(done.stderr or done.stdout).strip()[:400]}")
    return done.returncode == 0


def settings_step(dry_run: bool, deny: bool) -> bool:
    """The settings half of swap (``deny``) or restore, printed; on a dry run only what it would do
    (False then, so the caller stops)."""
    path = settings_path()
    rules = ", ".join(DENY_RULES)
    with errors_as_exit():
        data = read_settings(path)
        there, old = len(denied_rules(data)) == len(DENY_RULES), denies_whole_server(data)
        if dry_run:
            state = ("already there" if there else "would be added") if deny else \
                ("would be removed" if denied_rules(data) else "not there")
            click.echo(f"{path}: permissions.deny rules {rules}: {state}")
            if old:
                click.echo(f"{path}: the deniedMcpServers entry for {CLAUDE_MEM_SERVER} (an earlier swap's) would be "
                           "removed")
            return False
        changed = deny_claude_mem_search(path) if deny else allow_claude_mem_search(path)
    if old:
        click.echo(f"{path}: removed the deniedMcpServers entry for {CLAUDE_MEM_SERVER} (an earlier swap's: it "
                   "left out all of claude-mem's tools)")
    done, unchanged = ("denied", "were already denied") if deny else ("allowed again", "were not denied")
    click.echo(f"{path}: claude-mem's search tools {done if changed or old else unchanged} (permissions.deny: "
               f"{rules})")
    return True


@click.group("claude-code")
def claude_code() -> None:
    """Put memsync's search behind claude-mem's search tools in Claude Code, or take it back.

    `swap` registers `memsync mcp --profile claude-mem` with `claude mcp add` and denies
    claude-mem's own search, timeline and get_observations tools in Claude Code's user settings
    (permissions.deny), which leaves them out of the agent's tool list. claude-mem's plugin stays
    enabled: its hooks keep recording memory, its other tools stay, and its mem-search skill
    keeps teaching search, timeline and get_observations, now answered by memsync. `restore`
    undoes both. Start a new Claude Code session afterwards.
    """


@claude_code.command()
@common_options
@claude_option
def swap(claude_cmd: str, scope: str, dry_run: bool, **kwargs: Any) -> None:
    """memsync answers claude-mem's search, timeline and get_observations in Claude Code."""
    loaded = settings_from(kwargs)
    settings = loaded.settings
    claude = find_claude(claude_cmd)
    memsync = str(Path(sys.executable).parent / "memsync")
    env: list[str] = []
    # The server finds the same database and data directory as this command did: what was set
    # explicitly (or the demo database) is passed on; claude-mem's own rule needs nothing.
    if loaded.origins["db"] != "default" or is_demo(settings):
        env += ["-e", f"MEMSYNC_DB={settings.db}"]
    if loaded.origins.get("data_dir", "default") != "default":
        env += ["-e", f"MEMSYNC_DATA_DIR={settings.data_dir}"]
    if loaded.config_file is not None:
        env += ["-e", f"MEMSYNC_CONFIG={loaded.config_file}"]
    if not settings.db.exists():
        click.echo(f"memsync: note: the database {settings.db} does not exist yet; the server will refuse "
                   "to start until it does", err=True)
    # A registration under the same name (memsync's own profile, an earlier swap) is replaced.
    run_claude([claude, "mcp", "remove", "--scope", scope, SERVER_NAME], dry_run, check=False)
    # The name before the -e options: -e takes every value up to the next option (the real CLI
    # read the name as a malformed variable).
    run_claude([claude, "mcp", "add", "--scope", scope, SERVER_NAME, *env, "--", memsync, "mcp", "--profile",
                "claude-mem"], dry_run)
    if not settings_step(dry_run, deny=True):
        return
    click.echo("Done: start a new Claude Code session; claude-mem's hooks, skill and other tools stay on, its "
               "search tools are answered by memsync. Undo: memsync claude-code restore")


@claude_code.command()
@claude_option
def restore(claude_cmd: str, scope: str, dry_run: bool) -> None:
    """claude-mem's own search tools back, memsync's registration removed."""
    claude = find_claude(claude_cmd)
    removed = run_claude([claude, "mcp", "remove", "--scope", scope, SERVER_NAME], dry_run, check=False)
    if not settings_step(dry_run, deny=False):
        return
    if not removed:
        click.echo(f"memsync: no {SERVER_NAME!r} server was registered in the {scope} scope", err=True)
    click.echo("Done: start a new Claude Code session to get claude-mem's own search back.")
