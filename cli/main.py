"""The ``memsync`` command: a thin click layer over the worker and search libraries.

Results go to stdout (``--json`` for machines), messages and logs to stderr. Exit codes: 0 ok,
1 failure or drift found, 2 bad usage or configuration (a bad setting names its key).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from memsync.config.claude_mem.schema import Era, SchemaError
from memsync.config.errors import ConfigError, MemsyncError
from memsync.config.records import KIND_CHOICES, RecordRefError, format_ref, parse_iso
from memsync.config.settings import LoadedSettings, Settings, SettingsError, describe, load_settings

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def fail(message: str, code: int = EXIT_FAIL) -> None:
    """Print one line to stderr and exit."""
    click.echo(f"memsync: {message}", err=True)
    sys.exit(code)


def common_options(func: F) -> F:
    """--config, --db, --data-dir, --chroma-mode on every command."""
    options = [
        click.option("--config", "config_file", type=click.Path(path_type=Path), default=None,
                     help="TOML settings file (default: $MEMSYNC_CONFIG, then ~/.memsync/config.toml)."),
        click.option("--db", type=click.Path(path_type=Path), default=None,
                     help="The agent's claude-mem database [env MEMSYNC_DB; default ~/.claude-mem/claude-mem.db]."),
        click.option("--data-dir", type=click.Path(path_type=Path), default=None,
                     help="memsync's data directory [env MEMSYNC_DATA_DIR; default ~/.memsync]."),
        click.option("--chroma-mode", type=str, default=None,
                     help="managed | http | embedded [env MEMSYNC_CHROMA_MODE; default managed]."),
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
    try:
        loaded = load_settings(cli=cli, config_file=kwargs.pop("config_file", None))
    except SettingsError as exc:
        fail(str(exc), EXIT_USAGE)
        raise  # unreachable
    s = loaded.settings
    demo = demo_db_path(s)
    if loaded.origins["db"] == "default" and not s.db.exists() and demo.exists():
        # Same database as `make run` used: the demo, since no real one is configured.
        return LoadedSettings(s.model_copy(update={"db": demo}), loaded.origins, loaded.config_file)
    return loaded


def demo_db_path(settings: Settings) -> Path:
    """Where `make run` keeps the demo database when no real one is configured."""
    return settings.data_dir / "demo" / "claude-mem.db"


@contextmanager
def errors_as_exit() -> Iterator[None]:
    """Map memsync errors to one stderr line and an exit code (no stack traces for expected failures)."""
    try:
        yield
    except (ConfigError, SchemaError, SettingsError) as exc:
        fail(str(exc), EXIT_USAGE)
    except MemsyncError as exc:
        fail(str(exc), EXIT_FAIL)


@contextmanager
def graceful_stop() -> Iterator[threading.Event]:
    """First Ctrl-C/SIGTERM: finish the current batch and stop; second: stop now.

    The first signal is handled on a relay thread (worker.signals: a raw handler that sets an event
    or writes to stderr can deadlock the main thread); the second raises KeyboardInterrupt."""
    from memsync.worker.signals import SignalRelay

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


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="memsync")
def main() -> None:
    """memsync: semantic search over an AI coding agent's memory (claude-mem SQLite → Chroma).

    Settings come from flags, MEMSYNC_* environment variables, a TOML file, then defaults;
    `memsync settings` shows the effective values and where each came from.
    """


@main.command("settings")
@common_options
@json_option
def settings_cmd(as_json: bool, **kwargs: Any) -> None:
    """Print the effective settings and where each value came from."""
    loaded = settings_from(kwargs)
    rows = describe(loaded)
    if as_json:
        emit({"config_file": str(loaded.config_file) if loaded.config_file else None, "settings": rows}, True, "")
        return
    width = max(len(r["key"]) for r in rows)
    lines = [f"config file: {loaded.config_file or '(none)'}"]
    lines += [f"{r['key']:<{width}}  {r['value']!s:<40}  {r['origin']}" for r in rows]
    click.echo("\n".join(lines))


def _progress_bar(settings: Settings, project: str | None) -> tuple[Any, Callable[[int, int], None] | None]:
    if not sys.stderr.isatty():
        return None, None
    from tqdm import tqdm

    from memsync.worker.resync import count_rows

    # A pseudo-terminal may report a 0x0 size, with which tqdm draws nothing: assume 100x24 then.
    size = os.get_terminal_size(sys.stderr.fileno())
    bar = tqdm(total=count_rows(settings, project), unit="row", file=sys.stderr, dynamic_ncols=size.columns > 0,
               ncols=None if size.columns > 0 else 100, nrows=size.lines or 24)
    embedded = [0]

    def progress(rows: int, docs: int) -> None:
        embedded[0] += docs
        bar.set_postfix(embedded=embedded[0], refresh=False)
        bar.update(rows)

    return bar, progress


@main.command()
@common_options
@json_option
@click.option("--project", default=None, help="Sync only this project (including rows merged into it).")
@click.option("--rebuild", is_flag=True, help="Re-embed everything into a fresh collection, then switch to it.")
@click.option("--dry-run", is_flag=True, help="Report what would change; write nothing.")
def resync(as_json: bool, project: str | None, rebuild: bool, dry_run: bool, **kwargs: Any) -> None:
    """Bring Chroma in step with the database: add new, update changed, delete vanished documents.

    A second run on an unchanged database embeds and writes nothing. Ctrl-C stops after the
    current batch with nothing half-recorded; running again continues.
    """
    settings = settings_from(kwargs).settings
    from memsync.worker.resync import resync as run_resync

    with errors_as_exit(), graceful_stop() as stop:
        bar, progress = _progress_bar(settings, project)
        try:
            result = run_resync(settings, project=project, rebuild=rebuild, dry_run=dry_run, stop=stop,
                                progress=progress)
        finally:
            if bar is not None:
                bar.close()
    prefix = "dry run: would be " if dry_run else ""
    text = f"{prefix}{result.line()} ({result.rows} rows, {result.seconds:.1f}s)"
    if result.interrupted:
        text += "\ninterrupted: run `memsync resync` again to continue"
    emit(asdict(result), as_json, text)
    sys.exit(EXIT_FAIL if result.interrupted else EXIT_OK)


@main.command()
@common_options
@json_option
def verify(as_json: bool, **kwargs: Any) -> None:
    """Compare what SQLite implies with what Chroma holds: missing / orphan / stale documents.

    Exits 0 only when all are 0 (and no duplicate vectors), and the worker's local vector copy,
    when complete, holds exactly Chroma's documents with the same project, type and date.
    """
    settings = settings_from(kwargs).settings
    from memsync.worker.verify import verify as run_verify

    with errors_as_exit():
        report = run_verify(settings)
    text = (f"{report.missing} missing, {report.orphan} orphan, {report.stale} stale "
            f"({report.expected} expected, {report.in_chroma} in Chroma, {report.duplicates} duplicates)")
    if report.unusable_rows:
        text += f"; {report.unusable_rows} unusable rows"
    if report.copy_drift is not None:
        text += f"; vector copy: {report.copy_drift} documents differ from Chroma"
    emit({**asdict(report), "clean": report.clean}, as_json, text)
    sys.exit(EXIT_OK if report.clean else EXIT_FAIL)


def _fmt_ms(ms: int | None) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ") if ms else "never"


@main.command()
@common_options
@json_option
@click.option("--check", is_flag=True, help="Exit 1 when the worker is down or the lag exceeds --max-lag.")
@click.option("--max-lag", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Seconds of lag that --check tolerates.")
def status(as_json: bool, check: bool, max_lag: float, **kwargs: Any) -> None:
    """Worker state, lag, and per kind and project: rows in SQLite, documents synced, pending and
    failed rows, last sync. With --check: a health check for scripts (exit 0 healthy, 1 not)."""
    settings = settings_from(kwargs).settings
    from memsync.worker.status import status as run_status

    with errors_as_exit():
        report = run_status(settings)
    w = report.worker
    problems = []
    if not w.get("up"):
        problems.append(f"worker down ({w.get('reason')})")
    if report.lag_ms > max_lag * 1000:
        problems.append(f"lag {report.lag_ms / 1000:.1f}s > {max_lag:g}s")
    if check:
        text = "unhealthy: " + "; ".join(problems) if problems else f"healthy: lag {report.lag_ms / 1000:.1f}s"
        emit({"healthy": not problems, "problems": problems, "lag_ms": report.lag_ms, "worker": w}, as_json, text)
        sys.exit(EXIT_FAIL if problems else EXIT_OK)
    if as_json:
        emit(report.as_dict(), True, "")
        return
    state = "up" if w.get("up") else f"down ({w.get('reason')})"
    if w.get("up") and w.get("degraded"):
        state += f", degraded: {w.get('last_error')}"
    lines = [f"worker: {state}; mode {settings.chroma_mode}; chroma reachable: {w.get('chroma_reachable', False)}",
             f"lag: {report.lag_ms / 1000:.1f}s; pending rows: {report.pending_rows}; "
             f"failed rows: {sum(report.total(k).failed for k in report.buckets)}",
             f"collection: {report.collection or '(nothing synced yet)'}",
             f"text index: {_text_index_line(report.text_index)}; vector copy: {_copy_line(report.vector_copy)}",
             f"{'kind':<13}{'project':<24}{'rows':>8}{'synced':>8}{'docs':>8}{'pending':>8}{'failed':>8}  last sync"]
    for kind, projects in report.buckets.items():
        for project, b in sorted(projects.items()):
            lines.append(f"{kind:<13}{project[:23]:<24}{b.rows:>8}{b.synced_rows:>8}{b.documents:>8}"
                         f"{b.pending:>8}{b.failed:>8}  {_fmt_ms(b.last_sync_ms)}")
    for f in report.failures[:10]:
        lines.append(f"failed: {f['kind']} {f['id']}: {f['reason']}")
    click.echo("\n".join(lines))


def _text_index_line(state: dict[str, Any]) -> str:
    if not state.get("enabled"):
        return "off"
    if not state.get("built"):
        return "not built yet (the worker builds it)"
    behind = state["pending_rows"]
    return "up to date" if behind == 0 else f"{behind} rows behind (searched through FTS5 meanwhile)"


def _copy_line(state: dict[str, Any]) -> str:
    if not state.get("enabled"):
        return "off"
    if not state.get("present"):
        return "none yet (the worker fills it)"
    done = "complete" if state["complete"] else "filling, not used until complete"
    return f"{state['documents']} documents, {done}"


def result_line(r: Any) -> str:
    """One search result as a line: score, signals, kind and id, date, project, type, title."""
    when = datetime.fromtimestamp((r.created_at_epoch or 0) / 1000).strftime("%Y-%m-%d %H:%M")
    kind_type = r.type or r.kind.value
    mark = "  <- anchor" if r.field == "anchor" else "  (near-duplicate)" if r.field == "near_duplicate" else ""
    ident = format_ref(r.kind, r.id)
    return f"{r.score:.3f} {r.signals.value:<8} {ident:<8} {when}  [{r.project or ''}] {kind_type}: {r.title}{mark}"


def response_text(resp: Any) -> str:
    """A response for people: a header with mode, window and exclusions, then one line per result."""
    w = resp.window
    window = "all time" if w.source == "all_time" else f"last {w.days} days" if w.source == "window" else "date range"
    head = f"mode {resp.mode.value}" + (f" ({resp.reason})" if resp.reason else "") + f" · {window}"
    if resp.excluded_by_window:
        head += f" · {resp.excluded_by_window} older matches outside the window (--window-days 0 shows them)"
    lines = [head, *(result_line(r) for r in resp.results)]
    if resp.results and resp.results[0].record is not None:
        lines += ["", *(json.dumps(r.record, default=str, ensure_ascii=False) for r in resp.results)]
    return "\n".join(lines) if resp.results else head + "\n(no results)"


def _date(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_iso(value)
    except RecordRefError:
        fail(f"{name} must be an ISO date like 2026-11-01 or 2026-11-01T10:00:00Z, got {value!r}", EXIT_USAGE)
        raise


KIND_CHOICE = click.Choice(KIND_CHOICES)


def _batch_request(searcher: Any, line: str, defaults: dict[str, Any]) -> dict[str, Any]:
    """One line of `search --batch`: a JSON request in, the JSON contract (or an error) out."""
    from memsync.search import Filters, SearchError, parse_kinds

    try:
        req = json.loads(line)
        if not isinstance(req, dict) or not isinstance(req.get("query"), str):
            raise ValueError('each line must be a JSON object with a string "query"')
        kinds = parse_kinds(req.get("kind") or defaults["kind"])
        limit = int(req.get("limit") or defaults["limit"])
        wd = req.get("window_days", defaults["window_days"])
        resp = searcher.search(req["query"], kinds, Filters(project=req.get("project") or defaults["project"]),
                               None if wd is None else int(wd), limit)
        return resp.to_json()  # type: ignore[no-any-return]
    except (ValueError, TypeError, SearchError) as exc:
        return {"error": str(exc)}


@main.command()
@common_options
@json_option
@click.argument("query", required=False, default="")
@click.option("--project", default=None, help="Only this project (merged projects included).")
@click.option("--kind", type=KIND_CHOICE, default="all", show_default=True, help="Which records to search.")
@click.option("--type", "types", multiple=True, help="Observation type (repeatable), e.g. bugfix.")
@click.option("--concept", "concepts", multiple=True, help="Observation concept (repeatable).")
@click.option("--file", "files", multiple=True, help="Substring of a file read or modified (repeatable).")
@click.option("--since", default=None, help="Only records at or after this ISO date (replaces the window).")
@click.option("--until", default=None, help="Only records at or before this ISO date.")
@click.option("--limit", type=click.IntRange(1, 500), default=10, show_default=True, help="Results to show.")
@click.option("--offset", type=click.IntRange(0, 100_000), default=0, show_default=True, help="Results to skip.")
@click.option("--window-days", type=click.IntRange(0, None), default=None,
              help="Recency window in days; 0 = all time [settings: 90].")
@click.option("--order", type=click.Choice(["relevance", "newest", "oldest"]), default="relevance", show_default=True)
@click.option("--full", is_flag=True, help="Include each full record.")
@click.option("--batch", type=click.File("r"), default=None,
              help='Run one search per JSON line of FILE ("-" = stdin): {"query", "project", "kind", "limit", '
                   '"window_days"}; one JSON response per line, in order.')
def search(as_json: bool, query: str, project: str | None, kind: str, types: tuple[str, ...],
           concepts: tuple[str, ...], files: tuple[str, ...], since: str | None, until: str | None, limit: int,
           offset: int, window_days: int | None, order: str, full: bool, batch: Any, **kwargs: Any) -> None:
    """Search memory by meaning and by words (hybrid), newest 90 days by default.

    Results are observations (#id), session summaries (#S id) and user prompts (#P id), each with a
    score in 0..1 and the signals that found it. When the vector store is not reachable the answer
    comes from full-text search and says so (mode lexical_fallback). With --json the output is the
    documented contract: {"mode", "results": [{"kind", "id", "score", ...}], ...}.
    """
    settings = settings_from(kwargs).settings
    from memsync.search import Filters, Format, Order, Searcher, SearchError, parse_kinds

    searcher = Searcher(settings)
    try:
        with errors_as_exit():
            if batch is not None:
                defaults = {"kind": None if kind == "all" else kind, "limit": limit, "window_days": window_days,
                            "project": project}
                for line in batch:
                    if line.strip():
                        click.echo(json.dumps(_batch_request(searcher, line, defaults), default=str))
                return
            filters = Filters(project=project, types=types, concepts=concepts, files=files,
                              date_from=_date(since, "--since"), date_to=_date(until, "--until"))
            try:
                resp = searcher.search(query, parse_kinds(kind), filters, window_days, limit, offset, Order(order),
                                       Format.FULL if full else Format.INDEX)
            except SearchError as exc:
                fail(str(exc), EXIT_USAGE)
            emit(resp.to_json(), as_json, response_text(resp))
    finally:
        searcher.close()


@main.command()
@common_options
@json_option
@click.argument("anchor")
@click.option("--before", "depth_before", type=click.IntRange(0, 200), default=5, show_default=True,
              help="Records before the anchor.")
@click.option("--after", "depth_after", type=click.IntRange(0, 200), default=5, show_default=True,
              help="Records after the anchor.")
@click.option("--project", default=None, help="Only this project.")
def timeline(as_json: bool, anchor: str, depth_before: int, depth_after: int, project: str | None,
             **kwargs: Any) -> None:
    """What happened around ANCHOR, in order: observations, summaries and prompts mixed.

    ANCHOR is an observation id (123 or #123), S123 for a summary, P123 for a prompt, an ISO
    timestamp, or a query (the anchor is then its best match).
    """
    settings = settings_from(kwargs).settings
    from memsync.search import Searcher, SearchError

    searcher = Searcher(settings)
    try:
        with errors_as_exit():
            try:
                results, key = searcher.timeline(anchor, depth_before, depth_after, project)
            except SearchError as exc:
                fail(str(exc), EXIT_USAGE)
            data = {"anchor": {"kind": key[0].value, "id": key[1]}, "results": [r.to_json() for r in results]}
            emit(data, as_json, "\n".join(result_line(r) for r in results) or "(no records)")
    finally:
        searcher.close()


def existing_db(settings: Settings) -> Settings:
    """The settings, after checking that the database exists (servers fail at start, not per request)."""
    if not settings.db.exists():
        fail(f"database not found: {settings.db} (set --db or MEMSYNC_DB; `make run` creates a demo database)",
             EXIT_USAGE)
    return settings


@main.command()
@common_options
@click.option("--http-port", type=click.IntRange(1, 65535), default=None,
              help="Serve MCP over streamable HTTP on 127.0.0.1:PORT/mcp instead of stdio.")
def mcp(http_port: int | None, **kwargs: Any) -> None:
    """Serve memsync's search to agents over the Model Context Protocol (stdio by default).

    Tools: search, search_observations, search_sessions, search_user_prompts, find_by_concept,
    find_by_file, find_by_type, timeline, recent_context, get_observations, find_similar. Works
    without the worker: when the vector store is not reachable, answers come from full-text
    search and say so. Register with Claude Code: claude mcp add memsync -- memsync mcp
    """
    settings = existing_db(settings_from(kwargs).settings)
    from memsync.servers.mcp_tools import serve as serve_mcp

    with errors_as_exit():
        serve_mcp(settings, http_port)


@main.command()
@common_options
@click.option("--host", default=None, help="Address to listen on [settings serve_host: 127.0.0.1]; anything but "
                                            "loopback needs MEMSYNC_API_TOKEN.")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Port [settings serve_port: 8787].")
def serve(host: str | None, port: int | None, **kwargs: Any) -> None:
    """The HTTP API and search page: http://127.0.0.1:8787/ (API under /api, OpenAPI at /openapi.json).

    GET /api/search, /api/timeline, /api/records/{kind}/{id}, /api/similar/{id}, /api/status,
    /healthz, /metrics. With a token set (MEMSYNC_API_TOKEN), requests need
    "Authorization: Bearer <token>".
    """
    settings = existing_db(settings_from(kwargs).settings)
    from memsync.servers.http_api import check_binding
    from memsync.servers.http_api import serve as serve_http

    with errors_as_exit():
        check_binding(host or settings.serve_host, settings)
        click.echo(f"memsync: serving http://{host or settings.serve_host}:{port or settings.serve_port}/ "
                   f"on {settings.db}", err=True)
        serve_http(settings, host, port)


@main.group()
def db() -> None:
    """Create and fill claude-mem databases (for people without claude-mem, the demo and tests)."""


@db.command("init")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--legacy", is_flag=True, help="Use the older 5.x column names (no FTS tables).")
@click.option("--no-fts", is_flag=True, help="Leave out the FTS5 tables and triggers.")
def db_init(path: Path, legacy: bool, no_fts: bool) -> None:
    """Create an empty database in the claude-mem schema at PATH (never overwrites)."""
    from memsync.worker.importer import init_db

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
    "created_at" (ISO) or "created_at_epoch" (ms), and the kind's fields. See the README.
    """
    from memsync.worker.importer import RecordError, import_records, read_jsonl

    try:
        result = import_records(path, read_jsonl(file))
    except (RecordError, SchemaError) as exc:
        fail(str(exc), EXIT_USAGE)
    click.echo(f"imported {result.observations} observations, {result.summaries} summaries, "
               f"{result.prompts} prompts ({result.sessions} new sessions)")


@db.command("demo")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--sessions", type=click.IntRange(1, 1_000_000), default=40, show_default=True,
              help="Sessions to generate (about 8 rows each).")
@click.option("--seed", type=int, default=7, show_default=True, help="Random seed (same seed, same data).")
def db_demo(path: Path, sessions: int, seed: int) -> None:
    """Create a deterministic demo database at PATH (3 projects; dates end today)."""
    click.echo(make_demo_db(path, sessions, seed))


def make_demo_db(path: Path, sessions: int = 40, seed: int = 7) -> str:
    """Create the demo database; the dates end at today's midnight UTC so the window covers them."""
    from memsync.worker.demo import DAY_MS, generate
    from memsync.worker.importer import import_records, init_db

    today = int(datetime.now(UTC).timestamp() * 1000) // DAY_MS * DAY_MS
    init_db(path)
    r = import_records(path, generate(n_sessions=sessions, seed=seed, end_ms=today))
    return f"created demo database {path}: {r.observations} observations, {r.summaries} summaries, {r.prompts} prompts"


DEMO_QUERIES = ("database query timeout", "flaky tests and time", "dark mode in the dashboard")


@main.command()
@common_options
def demo(**kwargs: Any) -> None:
    """One-shot demo: the demo database if none is configured, a resync, then three searches."""
    settings = demo_or_configured(settings_from(kwargs))
    from memsync.config.chroma.server import ManagedServer

    # One managed server for the whole demo: resync and the searches adopt it instead of each
    # starting and stopping their own.
    server = ManagedServer(settings) if settings.chroma_mode == "managed" else None
    with errors_as_exit(), graceful_stop() as stop:
        try:
            if server is not None:
                server.ensure()
            _demo_steps(settings, stop)
        finally:
            if server is not None:
                server.stop()


def demo_or_configured(loaded: LoadedSettings) -> Settings:
    """The configured database; when it is the default one and missing, the demo database (made on
    first use) so that `make run` shows something on a fresh machine."""
    settings = loaded.settings
    if settings.db.exists():
        return settings
    if loaded.origins["db"] != "default":
        fail(f"database not found: {settings.db}", EXIT_USAGE)
    demo_db = demo_db_path(settings)
    if not demo_db.exists():
        click.echo(make_demo_db(demo_db), err=True)
    click.echo(f"no database at {settings.db}; using the demo database {demo_db}", err=True)
    return settings.model_copy(update={"db": demo_db})


@main.command()
@common_options
@click.option("--once", is_flag=True, help="One full reconcile pass, then exit (for cron and scripts).")
@click.option("--poll-interval", type=float, default=None, help="Seconds between checks for new rows [1].")
@click.option("--reconcile-interval", type=float, default=None,
              help="Seconds between full comparisons that find edits and deletes [600].")
@click.option("--metrics-port", type=click.IntRange(1, 65535), default=None,
              help="Serve Prometheus metrics on 127.0.0.1:PORT/metrics.")
def worker(once: bool, poll_interval: float | None, reconcile_interval: float | None, metrics_port: int | None,
           **kwargs: Any) -> None:
    """Keep Chroma in step with the database, continuously (runs in the foreground).

    New rows are searchable within about a second; edits and deletes arrive at the next reconcile
    (at start-up, every --reconcile-interval seconds, or now on SIGUSR1). Ctrl-C or SIGTERM stops
    after the current batch (and stops the managed Chroma server it started); a second one stops
    at once. Another terminal can watch `memsync status`.
    """
    # SIGUSR1's default action kills a process, and the worker's handler is installed only after
    # seconds of imports. A reconcile asked for before then is due anyway (one runs at start-up),
    # so until then the signal is ignored. (A soak once killed a just-restarted worker this way.)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    loaded = settings_from(kwargs)
    overrides = {k: v for k, v in (("poll_interval_s", poll_interval), ("reconcile_interval_s", reconcile_interval))
                 if v is not None}
    try:
        settings = Settings(**{**loaded.settings.model_dump(), **overrides})
    except ValueError as exc:
        fail(f"invalid option: {exc}".splitlines()[0], EXIT_USAGE)
    settings = demo_or_configured(LoadedSettings(settings, loaded.origins, loaded.config_file))
    from memsync.worker.daemon import Worker

    with errors_as_exit():
        if once:
            with graceful_stop() as stop:
                result = Worker(settings, metrics_port=metrics_port, stop=stop).once()
            click.echo(f"{result.line()} ({result.rows} rows, {result.seconds:.1f}s)")
            sys.exit(EXIT_FAIL if result.interrupted else EXIT_OK)
        daemon = Worker(settings, metrics_port=metrics_port)
        daemon.install_signals()
        sys.exit(daemon.run())


def _demo_steps(settings: Settings, stop: threading.Event) -> None:
    from memsync.search import Searcher
    from memsync.worker.resync import resync as run_resync

    result = run_resync(settings, stop=stop)
    click.echo(f"resync {settings.db}: {result.line()} ({result.rows} rows, {result.seconds:.1f}s)")
    searcher = Searcher(settings)
    try:
        for query in DEMO_QUERIES:
            click.echo(f"\nsearch: {query}")
            resp = searcher.search(query, window_days=0, limit=3)
            click.echo("  " + "\n  ".join(result_line(r) for r in resp.results))
    finally:
        searcher.close()


if __name__ == "__main__":
    main()
