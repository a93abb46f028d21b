"""claude-mem databases for people without claude-mem, the demo and tests: ``memsync db init``,
``db import``, ``db demo``, and the one-shot ``memsync demo``. :func:`make_demo_db` is also what
the benchmarks build their database with."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from memsync.commands.options import (
    EXIT_USAGE,
    common_options,
    demo_db_path,
    errors_as_exit,
    fail,
    graceful_stop,
    settings_from,
)
from memsync.config.claude_mem.schema import Era
from memsync.config.formats.database_owner import for_database
from memsync.config.settings import LoadedSettings, Settings
from memsync.search import Response, SearchRequest
from memsync.servers.render import result_line

if TYPE_CHECKING:
    from memsync.search import Searcher

# The demo's three searches, each showing one thing on the demo memory (tests/cli/test_demo.py):
# a paraphrase found by meaning (its top hit shares no word with it: a session-expiry warning),
# a question answered from two sessions (the backups that stopped, then the failed restore), and a
# plain keyword. The first is also the one the worker's ready line suggests.
DEMO_QUERIES = ("kicked out while typing into a form", "what went wrong with the nightly backups?", "pgbouncer")

DEMO_SESSIONS, DEMO_SEED = 40, 7  # `memsync db demo`'s defaults: the demo memory every tool and benchmark means


@click.group()
def db() -> None:
    """Create and fill claude-mem databases (for people without claude-mem, the demo and tests)."""


@db.command("init")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--legacy", is_flag=True, help="Use the older 5.x column names (no FTS tables).")
@click.option("--no-fts", is_flag=True, help="Leave out the FTS5 tables and triggers.")
def db_init(path: Path, legacy: bool, no_fts: bool) -> None:
    """Create an empty database in the claude-mem schema at PATH (never overwrites)."""
    from memsync.worker.seed import init_db

    try:
        init_db(path, Era.LEGACY if legacy else Era.CURRENT, fts=not no_fts)
    except FileExistsError as exc:
        fail(str(exc), EXIT_USAGE)
    click.echo(f"created {path}")


@db.command("import")
@click.argument("path", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.argument("file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
def db_import(path: Path, file: Path) -> None:
    """Append observations, summaries and prompts from a JSON-lines FILE to the database at PATH.

    One JSON object per line with "kind" (observation | summary | prompt), "project", "session",
    "created_at" (ISO) or "created_at_epoch" (ms), and the kind's fields: docs/operations.md.
    """
    from memsync.worker.seed import import_records, read_jsonl

    with errors_as_exit():
        result = import_records(path, read_jsonl(file))
    click.echo(f"imported {result.observations} observations, {result.summaries} summaries, "
               f"{result.prompts} prompts ({result.sessions} new sessions)")


@db.command("demo")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--sessions", type=click.IntRange(1, 1_000_000), default=DEMO_SESSIONS, show_default=True,
              help="Sessions to generate (about 6 rows each; past 40 the episodes are told again).")
@click.option("--seed", type=int, default=DEMO_SEED, show_default=True, help="Random seed (same seed, same data).")
def db_demo(path: Path, sessions: int, seed: int) -> None:
    """Create a deterministic demo database at PATH (3 projects; dates end today)."""
    click.echo(make_demo_db(path, sessions, seed))


def make_demo_db(path: Path, sessions: int = DEMO_SESSIONS, seed: int = DEMO_SEED) -> str:
    """Create the demo database; the dates end at today's midnight UTC so the window covers them."""
    from memsync.worker.seed import DAY_MS, generate, import_records, init_db

    today = int(datetime.now(UTC).timestamp() * 1000) // DAY_MS * DAY_MS
    init_db(path)
    r = import_records(path, generate(n_sessions=sessions, seed=seed, end_ms=today))
    return f"created demo database {path}: {r.observations} observations, {r.summaries} summaries, {r.prompts} prompts"


def demo_or_configured(loaded: LoadedSettings) -> Settings:
    """The configured database; when it is the default one and missing, the demo database (made on
    first use) so that `make run` shows something on a fresh machine, with its own data directory."""
    settings = loaded.settings
    if settings.db.exists():
        return settings
    if loaded.origins["db"] != "default":
        fail(f"database not found: {settings.db}", EXIT_USAGE)
    demo_db = demo_db_path(settings)
    if not demo_db.exists():
        click.echo(make_demo_db(demo_db), err=True)
    click.echo(f"no database at {settings.db}; using the demo database {demo_db}", err=True)
    return for_database(settings.model_copy(update={"db": demo_db}))


@click.command()
@common_options
def demo(**kwargs: Any) -> None:
    """One-shot demo: the demo database if none is configured, a resync, then three searches."""
    settings = demo_or_configured(settings_from(kwargs))
    from memsync.chroma.server import ManagedServer

    # One managed server for the whole demo: resync and the searches adopt it instead of each
    # starting and stopping their own.
    server = ManagedServer(settings) if settings.chroma_mode == "managed" else None
    with errors_as_exit(settings), graceful_stop() as stop:
        try:
            if server is not None:
                server.ensure()
            _demo_steps(settings, stop)
        finally:
            if server is not None:
                server.stop()


def _demo_steps(settings: Settings, stop: threading.Event) -> None:
    from memsync.search import Searcher
    from memsync.worker.pipeline.resync import resync as run_resync

    result = run_resync(settings, stop=stop)
    click.echo(f"resync {settings.db}: {result.line()} ({result.rows} rows, {result.seconds:.1f}s)")
    searcher = Searcher(settings)
    try:
        for query, resp in demo_searches(searcher):
            click.echo(f"\nsearch: {query}")
            click.echo("  " + "\n  ".join(result_line(r) for r in resp.results))
    finally:
        searcher.close()


def demo_searches(searcher: Searcher) -> list[tuple[str, Response]]:
    """The demo's three searches (:data:`DEMO_QUERIES`), all time, top 3 each."""
    return [(query, searcher.search(SearchRequest(query=query, window_days=0, limit=3))) for query in DEMO_QUERIES]
