"""What every ``memsync`` subcommand shares: the common options, settings from them, exit codes,
errors as one stderr line, a graceful Ctrl-C, output on stdout.

Results go to stdout (``--json`` for machines), messages and logs to stderr. Exit codes: 0 ok,
1 failure or drift found, 2 bad usage or configuration (a bad setting names its key). Help texts
take their defaults from the settings model (:func:`setting_default`), never restate them.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, TypeVar, get_args

import click

from memsync.config.claude_mem.user_settings import DEFAULT_DIR_RULE, data_dir_choice
from memsync.config.diskspace import explain, no_space
from memsync.config.errors import ConfigError, InvalidRequest, MemsyncError, StoreUnavailable, closest, one_line
from memsync.config.formats import database_owner
from memsync.config.settings import (
    DEFAULT_CONFIG_FILE,
    ENV_PREFIX,
    ChromaMode,
    LoadedSettings,
    Settings,
    load_settings,
)

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

# How the CLI translates the error tree (config.errors): the exit code of each branch it treats
# apart, the nearest one for every error. Fix the setup or the command line: 2; the rest (down,
# locked, slow, out of space: try again later) 1.
EXIT_CODES: dict[type[MemsyncError], int] = {
    ConfigError: EXIT_USAGE,
    InvalidRequest: EXIT_USAGE,
    MemsyncError: EXIT_FAIL,
}


def fail(message: str, code: int = EXIT_FAIL) -> NoReturn:
    """Print one line to stderr and exit (of printable text, whatever the message carries:
    ``one_line``)."""
    click.echo(f"memsync: {one_line(message)}", err=True)
    sys.exit(code)


# A default computed when the settings load has no value to print (help once said
# "default PydanticUndefined"): the help names where it comes from; `memsync settings` shows it.
COMPUTED_DEFAULTS = {"db": "where claude-mem keeps it, see `memsync settings`"}


def setting_default(name: str) -> str:
    """A setting's default as a help text prints it (``1.0`` as ``1``; a computed one in words)."""
    field = Settings.model_fields[name]
    if field.default_factory is not None:
        return COMPUTED_DEFAULTS.get(name, "computed at start, see `memsync settings`")
    value = field.default
    return f"{value:g}" if isinstance(value, float) else str(value)


def settings_note(name: str) -> str:
    """``[settings NAME: DEFAULT]``: the setting an option overrides and its default."""
    return f"[settings {name}: {setting_default(name)}]"


def env_note(name: str) -> str:
    """``[env MEMSYNC_NAME; default DEFAULT]``: the variable an option overrides and the default."""
    return f"[env {ENV_PREFIX}{name.upper()}; default {setting_default(name)}]"


def common_options(func: F) -> F:
    """--config, --db, --data-dir, --chroma-mode on every command."""
    options = [
        click.option("--config", "config_file", type=click.Path(path_type=Path), default=None,
                     help=f"TOML settings file (default: ${ENV_PREFIX}CONFIG, then {DEFAULT_CONFIG_FILE})."),
        click.option("--db", type=click.Path(path_type=Path), default=None,
                     help=f"The agent's claude-mem database {env_note('db')}."),
        click.option("--data-dir", type=click.Path(path_type=Path), default=None,
                     help=f"memsync's data directory {env_note('data_dir')}."),
        click.option("--chroma-mode", type=str, default=None,
                     help=f"{' | '.join(get_args(ChromaMode))} {env_note('chroma_mode')}."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def json_option(func: F) -> F:
    """--json: machine-readable output on stdout."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")(func)


def settings_from(kwargs: dict[str, Any]) -> LoadedSettings:
    """Build settings from the common options; a bad value exits 2 with one line naming the key."""
    cli = {k: kwargs.pop(k, None) for k in ("db", "data_dir", "chroma_mode")}
    with errors_as_exit():
        loaded = load_settings(cli=cli, config_file=kwargs.pop("config_file", None))
    s = loaded.settings
    demo = demo_db_path(s)
    if loaded.origins["db"] == "default" and not s.db.exists() and demo.exists():
        # Same database as `make run` used: the demo, since no real one is configured.
        s = s.model_copy(update={"db": demo})
    # The data directory that goes with the database (the demo's is its own).
    return LoadedSettings(database_owner.for_database(s), loaded.origins, loaded.config_file)


def demo_db_path(settings: Settings) -> Path:
    """Where `make run` keeps the demo database when no real one is configured (in the configured
    data directory; it works in a data directory of its own, ``config.formats.database_owner``)."""
    return database_owner.demo_db_path(settings.data_dir)


@contextmanager
def errors_as_exit(settings: Settings | None = None) -> Iterator[None]:
    """Map memsync errors to one stderr line and their exit code (``EXIT_CODES``; no stack traces
    for expected failures). With ``settings``, a write that failed for lack of space (in SQLite,
    on a file, or a local Chroma server's) is one line naming the full directory and the fix."""
    try:
        yield
    except MemsyncError as exc:
        shown = explain(exc, settings) if settings is not None and isinstance(exc, StoreUnavailable) else exc
        fail(str(shown), closest(exc, EXIT_CODES))
    except (sqlite3.Error, OSError) as exc:
        full = no_space(exc, settings) if settings is not None else None
        if full is None:
            raise
        fail(str(full), EXIT_FAIL)


@contextmanager
def graceful_stop() -> Iterator[threading.Event]:
    """First Ctrl-C/SIGTERM: finish the current batch and stop; second: stop now.

    The first signal is handled on a relay thread (worker.process.signals: a raw handler that sets an event
    or writes to stderr can deadlock the main thread); the second raises KeyboardInterrupt."""
    from memsync.worker.process import SignalRelay

    stop = threading.Event()

    def first(signum: int) -> None:
        if not stop.is_set():
            stop.set()
            click.echo("memsync: stopping after the current batch (Ctrl-C again to stop now)", err=True)

    with SignalRelay({signal.SIGINT: first, signal.SIGTERM: first}, interrupt_on_repeat=True):
        yield stop


def emit(data: Any, as_json: bool, text: str) -> None:
    """JSON or text on stdout."""
    click.echo(json.dumps(data, indent=2, default=str) if as_json else text)


def db_rule(loaded: LoadedSettings) -> str:
    """Which rule chose the database ``loaded`` reads, in words (for ``memsync status``)."""
    origin = loaded.origins["db"]
    if origin == "cli":
        return "--db"
    if origin == "env":
        return "MEMSYNC_DB"
    if origin.startswith("file:"):
        return f"db in {origin.removeprefix('file:')}"
    if origin.startswith("claude-mem: "):
        return origin.removeprefix("claude-mem: ")
    if database_owner.is_demo(loaded.settings):
        return f"the demo database (none at {data_dir_choice().db})"
    return DEFAULT_DIR_RULE
