"""``memsync claude-code swap`` / ``restore``: memsync's answers behind claude-mem's search tools in
Claude Code, in one command, and back (:mod:`memsync.config.claude_code.registrations` owns Claude Code's side)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from memsync.commands.options import EXIT_USAGE, common_options, errors_as_exit, fail, settings_from
from memsync.config.claude_code import (
    SERVER_NAME,
    ClaudeSettingsError,
    InjectTarget,
    SettingsChange,
    apply_change,
    claude_mem_injection,
    config_dir,
    hook_entry,
    hook_supported,
    inject_command,
    plan_restore,
    plan_swap,
    read_settings,
    registrations,
    settings_path,
    winning_scope,
)
from memsync.config.claude_mem.user_settings import data_dir_choice
from memsync.config.claude_mem.version import PORT_KEY, installed_version, worker_port, worker_version
from memsync.config.errors import one_line
from memsync.config.formats.database_owner import is_demo
from memsync.config.formats.worker_status import worker_state
from memsync.config.settings import Settings

CLAUDE_TIMEOUT = 60  # seconds for one `claude mcp` call (it answers in about a second)


def claude_option(func: Any) -> Any:
    """--claude, --scope and --dry-run, shared by swap and restore."""
    func = click.option("--dry-run", is_flag=True, help="Print what would be run and changed; change nothing.")(func)
    func = click.option("--scope", type=click.Choice(["user", "local", "project"]), default="user", show_default=True,
                        help="Where `claude mcp add` registers memsync (user: every project).")(func)
    return click.option("--claude", "claude_cmd", default="claude", show_default=True,
                        help="Claude Code's command (a name on PATH or a path).")(func)


def known_locations(env: Mapping[str, str] | None = None) -> list[Path]:
    """Where Claude Code's installers put ``claude`` when it may not be on PATH: the native
    installer's ``~/.local/bin/claude`` and the older local install's ``~/.claude/local/claude``
    (reached through a shell alias, which a subprocess does not see)."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home())
    return [home / ".local" / "bin" / "claude", home / ".claude" / "local" / "claude"]


def locate_claude(name: str) -> tuple[str | None, str]:
    """``claude``'s path (the default name is also looked for where the installers put it) and
    where it was found, or None and where it was looked for."""
    found = shutil.which(name)
    if found is not None:
        return found, "on PATH"
    if name == "claude":
        for path in known_locations():
            if path.is_file() and os.access(path, os.X_OK):
                click.echo(f"memsync: note: Claude Code's command is not on PATH; using {path}", err=True)
                return str(path), "not on PATH; where its installer puts it"
    if os.sep in name:
        return None, "no executable file there"
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    where = f"not on PATH ({', '.join(dirs) or 'empty'})"
    if name == "claude":
        where += f" nor at {', '.join(str(p) for p in known_locations())}"
    return None, where


def not_found(name: str, where: str) -> str:
    """The refusal for a ``claude`` that was not found: where it was looked for, how to get it."""
    return f"Claude Code's command {name!r} was not found: {where}; install Claude Code, or pass --claude PATH"


def claude_line(name: str, found: str | None, where: str) -> str:
    """A dry run's line on Claude Code's command: the one the real run would use, or where it was
    looked for in vain."""
    if found is None:
        return f"Claude Code: {name!r} not found ({where}): the real run stops (below)"
    return f"Claude Code: {found} ({where})"


def run_claude(args: list[str], dry_run: bool, check: bool = True) -> bool:
    """Run one ``claude`` command (printed first); False when it failed and ``check`` is off."""
    click.echo(f"$ {shlex.join(args)}")
    if dry_run:
        return True
    done = subprocess.run(args, capture_output=True, text=True, timeout=CLAUDE_TIMEOUT, stdin=subprocess.DEVNULL)
    if done.returncode != 0 and check:
        fail(f"`{shlex.join(args[:3])}` failed ({done.returncode}): {one_line(done.stderr or done.stdout, 400)}")
    return done.returncode == 0


def plan_settings(swap: bool, hook: dict[str, Any] | None = None) -> SettingsChange:
    """The settings half of swap (with the hook entry ``hook``) or restore, worked out and not
    written: a file it cannot edit is refused here, before any ``claude`` command runs, the same on
    a dry run as on the real one."""
    with errors_as_exit():
        return plan_swap(settings_path(), hook) if swap else plan_restore(settings_path())


def refuse(why: str, dry_run: bool, refusals: list[str]) -> None:
    """A refusal: the real run stops here (exit 2, one line); a dry run notes it and goes on, to
    print the rest of the plan and then every refusal (:func:`end_dry_run`)."""
    if not dry_run:
        fail(why, EXIT_USAGE)
    refusals.append(why)


def settings_plannable(swap: bool, dry_run: bool, refusals: list[str], hook: dict[str, Any] | None = None) -> bool:
    """Whether the settings half can be planned: a file it cannot edit is refused here, before any
    ``claude`` command runs, on a dry run as on the real one (:func:`refuse`)."""
    try:
        plan_swap(settings_path(), hook) if swap else plan_restore(settings_path())
    except ClaudeSettingsError as exc:
        refuse(str(exc), dry_run, refusals)
        return False
    return True


def end_dry_run(refusals: list[str]) -> None:
    """A dry run's end: the refusals the real run would stop at, then its exit code."""
    for refusal in refusals:
        click.echo(f"memsync: {one_line(refusal)}", err=True)
    if refusals:
        sys.exit(EXIT_USAGE)  # what the real run exits with, at the first of them


def settings_step(swap: bool, dry_run: bool, hook: dict[str, Any] | None = None) -> None:
    """Print the settings half (``would ...`` on a dry run), and on a real run write it: planned
    again, as the file may have changed while ``claude`` ran."""
    change = plan_settings(swap, hook)
    if not dry_run:
        with errors_as_exit():
            apply_change(change)
    for step in change.steps:
        click.echo(f"{change.path}: {step.describe(done=not dry_run)}")
    if not change.steps:
        why = ("claude-mem's search tools are denied and the hook is in place already" if swap
               else "no swap is recorded in it")
        click.echo(f"{change.path}: nothing to change ({why})")
    for note in change.notes:
        click.echo(f"memsync: note: {note}", err=True)


@click.group("claude-code")
def claude_code() -> None:
    """Put memsync's search behind claude-mem's search tools in Claude Code, or take it back.

    `swap` registers `…/memsync mcp --profile claude-mem` with `claude mcp add` (the memsync in
    the virtual environment by its absolute path, e.g. /path/to/memsync/.venv/bin/memsync) and denies
    claude-mem's own search, timeline and get_observations tools in Claude Code's user settings
    (permissions.deny), which leaves them out of the agent's tool list. claude-mem's plugin stays
    enabled: its hooks keep recording memory, its other tools stay, and its mem-search skill
    keeps teaching search, timeline and get_observations, now answered by memsync. `swap` also
    adds a UserPromptSubmit hook (`…/memsync claude-code inject`, the same executable, answered by the running `memsync
    worker`) to the same settings file whatever --scope is, which puts the memories that fit in
    front of each prompt, and the same command as a SessionStart hook run on a compaction, after
    which a memory given earlier in the session may be given again (not on Windows). `swap`
    records what it added to the settings file in the file itself (memsyncSwap); `restore` removes
    the registration and exactly what that record names, so rules and hooks the user wrote stay.
    Start a new Claude Code session afterwards.
    """


@claude_code.command()
@common_options
@claude_option
def swap(claude_cmd: str, scope: str, dry_run: bool, **kwargs: Any) -> None:
    """memsync answers claude-mem's search tools and injects memories into each prompt.

    In Claude Code, memsync answers claude-mem's search, timeline and get_observations, and a
    UserPromptSubmit hook puts the memories that fit in front of each prompt. --dry-run prints the
    whole plan, then each refusal the real run would stop at, and exits as it would."""
    loaded = settings_from(kwargs)
    settings = loaded.settings
    refusals: list[str] = []  # what stops the real run, in its order (a dry run goes on to list them all)
    claude, where = locate_claude(claude_cmd)
    if claude is None:
        refuse(not_found(claude_cmd, where), dry_run, refusals)
    memsync = str(Path(sys.executable).parent / "memsync")
    # The server and the hook find the same database and data directory as this command did: what
    # was set explicitly (or the demo database) is passed on; claude-mem's own rule needs nothing.
    pass_db = loaded.origins["db"] != "default" or is_demo(settings)
    hook = None
    if hook_supported():
        hook = hook_entry(inject_command(Path(memsync), InjectTarget(
            settings.data_dir, settings.db if pass_db else None, loaded.config_file)))
    planned = settings_plannable(True, dry_run, refusals, hook)  # before `claude mcp add`
    passed: list[tuple[str, str, Path]] = []  # (variable, option, value) the server is given
    if pass_db:
        passed.append(("MEMSYNC_DB", "--db", settings.db))
    if loaded.origins.get("data_dir", "default") != "default":
        passed.append(("MEMSYNC_DATA_DIR", "--data-dir", settings.data_dir))
    if loaded.config_file is not None:
        passed.append(("MEMSYNC_CONFIG", "--config", loaded.config_file))
    env = [arg for var, _, value in passed for arg in ("-e", f"{var}={value}")]
    worker = ["memsync", "worker", *(arg for _, option, value in passed for arg in (option, str(value)))]
    if not settings.db.exists():
        click.echo(f"memsync: note: the database {settings.db} does not exist yet; the server will refuse "
                   "to start until it does", err=True)
    scope_notes(scope)
    command = claude or claude_cmd  # a dry run without Claude Code shows the name it was given
    # A registration under the same name (memsync's own profile, an earlier swap) is replaced.
    run_claude([command, "mcp", "remove", "--scope", scope, SERVER_NAME], dry_run, check=False)
    # The name before the -e options: -e takes every value up to the next option (the real CLI
    # read the name as a malformed variable).
    run_claude([command, "mcp", "add", "--scope", scope, SERVER_NAME, *env, "--", memsync, "mcp", "--profile",
                "claude-mem"], dry_run)
    if planned:
        settings_step(swap=True, dry_run=dry_run, hook=hook)
    else:
        click.echo(f"{settings_path()}: cannot plan its edit (below)")
    if dry_run:
        click.echo(claude_line(claude_cmd, claude, where))
        click.echo(claude_mem_line(settings.claude_mem_timeout_s))
    if planned:
        hook_notes(hook is not None, settings, shlex.join(worker))
    if dry_run:
        end_dry_run(refusals)
        return
    click.echo("Done: start a new Claude Code session; claude-mem's hooks, skill and other tools stay on, its "
               "search tools are answered by memsync, and memsync puts the memories that fit in front of each "
               "prompt. Undo: memsync claude-code restore")


def scope_notes(scope: str) -> None:
    """What the user should know about memsync registered at other scopes: which registration
    Claude Code will use once swap registered at ``scope`` (local > project > user)."""
    others = [r for r in registrations(SERVER_NAME, Path.cwd()) if r.scope != scope]
    if not others:
        return
    for other in others:
        click.echo(f"memsync: note: {SERVER_NAME!r} is registered at {other.scope} scope too ({other.file}: "
                   f"{other.command})", err=True)
    winner = winning_scope(others, scope)
    if winner == scope:
        click.echo(f"memsync: note: Claude Code uses this {scope} registration (local > project > user); the "
                   f"{' and '.join(r.scope for r in others)} one stays, unused here", err=True)
        return
    click.echo(f"memsync: warning: Claude Code uses the {winner} registration, not this {scope} one (local > "
               f"project > user): remove it (`claude mcp remove --scope {winner} {SERVER_NAME}`) or swap with "
               f"--scope {winner}", err=True)


def claude_mem_line(timeout_s: float) -> str:
    """Whether claude-mem is installed, found by its own rule (the plugin in Claude Code's
    directory, else a worker answering on its port), and its database (its data directory's rule)."""
    installed = installed_version()
    plugins = config_dir() / "plugins"
    choice = data_dir_choice()
    db = f"its database {choice.db} ({choice.rule}) {'exists' if choice.db.exists() else 'does not exist'}"
    if installed is not None:
        return f"claude-mem: {installed.version} installed ({installed.source}); {db}"
    port = worker_port()
    running = worker_version(port, timeout_s)
    if running is not None:
        return (f"claude-mem: no plugin in {plugins}, but its worker {running} answers on 127.0.0.1:{port} "
                f"({PORT_KEY} or its default); {db}")
    return (f"claude-mem: not installed (no plugin in {plugins / 'cache' / 'thedotmack' / 'claude-mem'} or "
            f"{plugins / 'marketplaces' / 'thedotmack'}, no worker on 127.0.0.1:{port}): the deny rules wait for "
            f"it; {db}")


def hook_notes(installed: bool, settings: Settings, worker: str) -> None:
    """What the user should know about the per-prompt hook: not on Windows; Claude Code's hooks
    all turned off; claude-mem's own per-prompt injection on as well; memsync's turned off or not
    answerable with these settings; no worker running to answer it."""
    from memsync.servers.inject_listener import unavailable_reason

    data_dir, db = settings.data_dir, settings.db
    if not installed:
        click.echo("memsync: note: no per-prompt memory hook on Windows (it talks to the worker over a unix "
                   "socket); the search tools are swapped all the same", err=True)
        return
    with errors_as_exit():
        claude_settings = read_settings(settings_path())
    if claude_settings.get("disableAllHooks") is True:
        click.echo(f"memsync: note: {settings_path()} sets disableAllHooks: Claude Code runs no hook, memsync's "
                   "included, until it is removed", err=True)
    where = claude_mem_injection(claude_settings)
    if where is not None:
        click.echo("memsync: note: claude-mem's own per-prompt injection is on (CLAUDE_MEM_SEMANTIC_INJECT), so "
                   f"both would inject memory into every prompt; to turn claude-mem's off, see {where}", err=True)
    if not settings.inject:
        click.echo("memsync: note: inject is off (MEMSYNC_INJECT=false): the hook is installed and injects nothing "
                   "until it is on", err=True)
        return
    if (reason := unavailable_reason(settings)) is not None:
        click.echo(f"memsync: warning: the worker answers no prompt with these settings: {reason}", err=True)
        return
    state = worker_state(data_dir, int(time.time() * 1000), db=db)
    if not state["up"]:
        click.echo(f"memsync: warning: no memsync worker is running for {db} (data directory {data_dir}: "
                   f"{state['reason']}); the hook injects nothing until one does: start `{worker}`", err=True)


@claude_code.command()
@claude_option
def restore(claude_cmd: str, scope: str, dry_run: bool) -> None:
    """claude-mem's own search tools back; memsync's registration and hook removed.

    --dry-run prints the plan, then each refusal the real run would stop at, and exits as it would."""
    refusals: list[str] = []
    claude, where = locate_claude(claude_cmd)
    if claude is None:
        refuse(not_found(claude_cmd, where), dry_run, refusals)
    planned = settings_plannable(False, dry_run, refusals)  # before `claude mcp remove`
    removed = run_claude([claude or claude_cmd, "mcp", "remove", "--scope", scope, SERVER_NAME], dry_run, check=False)
    if planned:
        settings_step(swap=False, dry_run=dry_run)
    else:
        click.echo(f"{settings_path()}: cannot plan its edit (below)")
    for other in registrations(SERVER_NAME, Path.cwd()):
        if other.scope != scope:
            click.echo(f"memsync: note: {SERVER_NAME!r} stays registered at {other.scope} scope ({other.file}: "
                       f"{other.command}); `claude mcp remove --scope {other.scope} {SERVER_NAME}` removes it",
                       err=True)
    if dry_run:
        click.echo(claude_line(claude_cmd, claude, where))
        end_dry_run(refusals)
        return
    if not removed:
        click.echo(f"memsync: no {SERVER_NAME!r} server was registered in the {scope} scope", err=True)
    click.echo("Done: start a new Claude Code session to get claude-mem's own search back, without memsync's "
               "per-prompt hook.")


@claude_code.command(context_settings={"ignore_unknown_options": True})
@click.option("--data-dir", type=click.Path(path_type=Path), default=None,
              help="The data directory whose running worker answers (as for every command).")
@click.option("--db", type=click.Path(path_type=Path), default=None, help="The agent's database (the demo's rule).")
@click.option("--config", type=click.Path(path_type=Path), default=None, help="A memsync TOML config file.")
def inject(data_dir: Path | None, db: Path | None, config: Path | None) -> None:
    """Claude Code's per-prompt hook (installed by swap): the UserPromptSubmit payload on stdin, the
    running worker's memory for it on stdout as hook output, or nothing. A SessionStart payload of a
    compaction makes the worker forget what it injected in that session (nothing printed).

    Always exits 0 and gives up after 1 s; silent when no worker listens, one stderr line for input
    it cannot use. The executable runs it before the rest of the command loads (standard library only).
    """
    from memsync.inject_client import main as hook

    args = [a for name, value in (("--data-dir", data_dir), ("--db", db), ("--config", config)) if value is not None
            for a in (name, str(value))]
    sys.exit(hook(args))
