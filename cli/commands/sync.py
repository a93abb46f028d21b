"""Keeping Chroma in step with the database, and seeing how it stands: ``memsync resync``,
``verify``, ``status``, ``worker`` and ``settings``."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import signal
import sqlite3
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

from memsync.commands.db import demo_or_configured
from memsync.commands.options import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_USAGE,
    common_options,
    db_rule,
    emit,
    errors_as_exit,
    fail,
    graceful_stop,
    json_option,
    settings_from,
    settings_note,
)
from memsync.config.claude_mem.projects import INTERNAL_PROJECTS, exclusion
from memsync.config.claude_mem.schema import SchemaError
from memsync.config.claude_mem.version import TESTED_SCHEMA_VERSION, claude_mem_version, schema_warning
from memsync.config.diskspace import no_space
from memsync.config.errors import NoSpace, SourceUnavailable, one_line
from memsync.config.formats.worker_status import DEFAULT_MAX_LAG_S, PHASE_FIRST_PASS, PHASE_FOLLOWING, worker_state
from memsync.config.settings import DEFAULT_DATABASE, DEFAULT_TENANT, LoadedSettings, Settings, describe
from memsync.servers.render import days_text, utc_stamp

if TYPE_CHECKING:
    from memsync.worker.pipeline import Scope, SyncResult


@click.command("settings")
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


class _ProgressBar:
    """resync's bar on a terminal: rows (both passes with the upstream store), documents embedded,
    and, while memsync's own pass runs (newest first), how far back search by meaning reaches and
    when the default window is done (``worker.pipeline.progress``, looked at every few seconds)."""

    LOOK_EVERY_S = 5.0

    def __init__(self, settings: Settings, scope: Scope) -> None:
        from tqdm import tqdm

        from memsync.config.formats.first_sync import every_kind
        from memsync.worker.pipeline import FirstSyncProgress, count_rows
        from memsync.worker.rows import SourceReader

        # A pseudo-terminal may report a 0x0 size, with which tqdm draws nothing: assume 100x24 then.
        size = os.get_terminal_size(sys.stderr.fileno())
        self.bar = tqdm(total=count_rows(settings, scope), unit="row", file=sys.stderr,
                        dynamic_ncols=size.columns > 0, ncols=None if size.columns > 0 else 100,
                        nrows=size.lines or 24)
        self.cursor = every_kind()  # the pass's own, moved as it goes (Scope.resume)
        self.first = FirstSyncProgress(self.cursor, settings.window_days)
        self.reader = SourceReader.open(settings)
        self.embedded, self.looked, self.reach = 0, 0.0, ""

    def progress(self, rows: int, docs: int) -> None:
        """``worker.pipeline.sync`` ProgressFn."""
        self.embedded += docs
        self.first.passed(rows, docs)
        now = time.monotonic()
        if now - self.looked >= self.LOOK_EVERY_S:
            self.looked = now
            with contextlib.suppress(SourceUnavailable):
                got = self.first.snapshot(self.reader)
                since = got["searchable_from_ms"]
                self.reach = ("all" if not got["rows_left"] else
                              f"{utc_stamp(since)[:10]}, window in {_duration(got['eta_window_s'])}" if since else "")
        self.bar.set_postfix(embedded=self.embedded, **({"searchable": self.reach} if self.reach else {}),
                             refresh=False)
        self.bar.update(rows)

    def close(self) -> None:
        """Close the bar and its reader."""
        self.bar.close()
        self.reader.close()


@click.command()
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
    from memsync.worker.pipeline import Scope
    from memsync.worker.pipeline.resync import resync as run_resync  # shares its module's name

    scope = Scope(project=project, dry_run=dry_run)
    with errors_as_exit(settings), graceful_stop() as stop:
        bar = _ProgressBar(settings, scope) if sys.stderr.isatty() else None
        if bar is not None:
            scope = dataclasses.replace(scope, resume=bar.cursor)  # the bar follows the pass's place
        try:
            result = run_resync(settings, scope=scope, rebuild=rebuild, stop=stop,
                                progress=None if bar is None else bar.progress)
        finally:
            if bar is not None:
                bar.close()
    prefix = "dry run: would be " if dry_run else ""
    text = f"{prefix}{result.line()} ({result.rows} rows, {result.seconds:.1f}s)" + _upstream_result(result)
    if result.interrupted:
        text += "\ninterrupted: run `memsync resync` again to continue"
    emit(asdict(result), as_json, text)
    sys.exit(EXIT_FAIL if result.interrupted else EXIT_OK)


@click.command()
@common_options
@json_option
def verify(as_json: bool, **kwargs: Any) -> None:
    """Compare what SQLite implies with what Chroma holds: missing / orphan / stale documents.

    Exits 0 only when all are 0 (and no duplicate vectors), and the worker's local vector copy,
    when complete, holds exactly Chroma's documents with the same project, type and date, and
    memsync's text index, when built, is whole.
    """
    settings = settings_from(kwargs).settings
    from memsync.worker.checks.verify import verify as run_verify

    with errors_as_exit(settings):
        report = run_verify(settings)
    text = (f"{report.missing} missing, {report.orphan} orphan, {report.stale} stale "
            f"({report.expected} expected, {report.in_chroma} in Chroma, {report.duplicates} duplicates)")
    if report.unusable_rows:
        text += f"; {report.unusable_rows} unusable rows"
    if report.copy_damaged is not None:
        text += f"; vector copy damaged ({report.copy_damaged}): the worker discards and rebuilds it"
    elif report.copy_drift is not None:
        text += f"; vector copy: {report.copy_drift} documents differ from Chroma"
    if report.text_index_damaged is not None:
        text += (f"; text index damaged ({report.text_index_damaged}): lexical searches use FTS5, "
                 "the worker discards and rebuilds it")
    emit({**asdict(report), "clean": report.clean}, as_json, text)
    sys.exit(EXIT_OK if report.clean else EXIT_FAIL)


@click.command()
@common_options
@json_option
@click.option("--check", is_flag=True, help="Exit 1 when the worker is down or the lag exceeds --max-lag.")
@click.option("--max-lag", type=click.FloatRange(min=0), default=DEFAULT_MAX_LAG_S, show_default=True,
              help="Seconds of lag that --check tolerates.")
def status(as_json: bool, check: bool, max_lag: float, **kwargs: Any) -> None:
    """Worker state, lag, and per kind and project: rows in SQLite, documents synced, pending and
    failed rows, last sync. With --check: a health check for scripts (exit 0 healthy, 1 not);
    during the worker's first pass the lag is not checked, only that it is up and not degraded."""
    loaded = settings_from(kwargs)
    settings = loaded.settings
    from memsync.worker.checks import verdict
    from memsync.worker.checks.status import status as run_status  # shares its module's name

    with errors_as_exit(settings):
        try:
            report = run_status(settings)
        except (SourceUnavailable, SchemaError, NoSpace, sqlite3.Error, OSError) as exc:
            _worker_beside(settings, exc, as_json, check)
            raise
    database = {"path": str(settings.db), "chosen_by": db_rule(loaded)}
    excluded = exclusion(settings.excluded_projects)
    excluded_json = {"patterns": list(excluded.patterns), "ignored": list(excluded.ignored),
                     "left_out": dict(sorted(report.left_out.items()))}
    w = report.worker
    if check:
        health = verdict(report, max_lag)
        text = ("unhealthy: " + "; ".join(health.problems) if not health.healthy else
                f"healthy: {_phase_text(w)} (lag not checked until it ends)" if report.starting() else
                f"healthy: lag {report.lag_ms / 1000:.1f}s")
        emit({**health.as_dict(), "lag_ms": report.lag_ms, "worker": w}, as_json, text)
        sys.exit(EXIT_OK if health.healthy else EXIT_FAIL)
    claude_mem = claude_mem_version(settings.claude_mem_timeout_s)
    warning = schema_warning(report.schema_version)
    if warning:
        click.echo(f"warning: {warning}", err=True)
    injection = _injection(settings, w)
    if as_json:
        emit({**report.as_dict(), "database": database, "excluded_projects": excluded_json, "injection": injection,
              "claude_mem": {**claude_mem.as_dict(), "tested_schema_version": TESTED_SCHEMA_VERSION},
              "schema_warning": warning}, True, "")
        return
    state = _worker_text(w)
    embedding = settings.embedding_provider + ("" if w.get("embedding_reachable", True) else " (endpoint unavailable)")
    version = "" if report.schema_version is None else f"; claude-mem schema version {report.schema_version}"
    lines = [f"database: {database['path']} (chosen by {database['chosen_by']}{version})",
             f"claude-mem: {claude_mem.version} (from {claude_mem.source})"]
    if excluded.patterns:
        lines.append("excluded projects: " + ", ".join(excluded.patterns) + (
            f" (ignored, a directory and not a name: {', '.join(excluded.ignored)})" if excluded.ignored else ""))
    lines += [f"worker: {state}; mode {settings.chroma_mode}; chroma reachable: {w.get('chroma_reachable', False)}; "
              f"embedding: {embedding}",
              f"injection: {injection['line']}",
              f"lag: {report.lag_ms / 1000:.1f}s; pending rows: {report.pending_rows}; "
              f"failed rows: {sum(report.total(k).failed for k in report.buckets)}",
              f"collection: {report.collection or '(nothing synced yet)'}; store: {_store_line(report.store)}",
              f"text index: {_text_index_line(report.text_index)}; vector copy: {_copy_line(report.vector_copy)}",
              *_upstream_lines(report.upstream),
              f"{'kind':<13}{'project':<24}{'rows':>8}{'synced':>8}{'docs':>8}{'pending':>8}{'failed':>8}  last sync"]
    for kind, projects in report.buckets.items():
        for project, b in sorted(projects.items()):
            lines.append(f"{kind:<13}{project[:23]:<24}{b.rows:>8}{b.synced_rows:>8}{b.documents:>8}"
                         f"{b.pending:>8}{b.failed:>8}  {utc_stamp(b.last_sync_ms)}")
    if report.left_out:  # the excluded projects' rows (claude-mem's own project among them), with no documents
        names = [f"{p} (claude-mem's own, {n} rows)" if p in INTERNAL_PROJECTS else f"{p} ({n} rows)"
                 for p, n in sorted(report.left_out.items())]
        lines.append(f"left out, excluded: {', '.join(names)}: no documents, no search finds them")
    for f in report.failures[:10]:
        lines.append(f"failed: {f['kind']} {f['id']}: {f['reason']}")
    if report.languages.get("suggestion"):
        lines.append(f"suggestion: {report.languages['suggestion']}")
    click.echo("\n".join(lines))


def _worker_beside(settings: Settings, exc: BaseException, as_json: bool, check: bool) -> None:
    """Status could not read the database or memsync's records (``exc``, which the caller then
    reports as its one error line): the worker's own state still goes to stdout, since a worker
    degraded by the same cause says so, why, and when it retries (``worker.json``, or the record
    kept in place while that cannot be written)."""
    shown = no_space(exc, settings) if isinstance(exc, sqlite3.Error | OSError) else exc
    if shown is None:
        return  # not a state status explains: the error goes up as it is
    w = worker_state(settings.data_dir, int(time.time() * 1000), settings.db)
    error = one_line(str(shown))
    verdict = {"healthy": False, "problems": [error]} if check else {}
    emit({**verdict, "worker": w, "error": error}, as_json, f"worker: {_worker_text(w)}")


def _injection(settings: Settings, w: dict[str, Any]) -> dict[str, Any]:
    """Per-prompt injection: the hook in Claude Code's settings file, whether the worker answers it
    (up, listening), what it served in the last day (counts, never prompt text)."""
    from memsync.config.claude_code import (
        COMPACT_AT,
        HOOKS_ELSEWHERE_REFUSED_SINCE,
        ClaudeSettingsError,
        hook_in,
        read_settings,
        record_misread_by_claude_code,
        settings_path,
    )
    from memsync.config.formats.inject_stats import served
    from memsync.config.inject_channel import socket_path
    from memsync.servers.inject_listener import unavailable_reason

    try:  # read once: whether the hook is there and whether Claude Code reads the file come from one text
        claude_settings = read_settings(settings_path())
    except ClaudeSettingsError:
        claude_settings = {}  # missing or unreadable: "not installed" (status never fails on it)
    installed = hook_in(claude_settings, settings.data_dir)
    compaction = hook_in(claude_settings, settings.data_dir, COMPACT_AT)
    misread = record_misread_by_claude_code(claude_settings)
    reason = unavailable_reason(settings)
    # A killed worker leaves its socket behind: with settings it cannot answer, nothing listens on it.
    listening = bool(w.get("up")) and reason is None and socket_path(settings.data_dir).is_socket()
    counts = served(settings.data_dir, int(time.time() * 1000))
    # Before anything else: such a file is not applied at all (its deny rules and plugins neither).
    state = (f"not applied by Claude Code {HOOKS_ELSEWHERE_REFUSED_SINCE} and later: {settings_path()} holds "
             "swap's record as an earlier memsync wrote it, which they take for a misplaced hook, and they "
             "apply nothing of that file; run `memsync claude-code swap` again to rewrite it" if misread else
             "off (inject = false)" if not settings.inject else
             ("active" if installed else "the worker listens for it") if listening else
             "inactive: worker down" if not w.get("up") else
             f"inactive: {reason}" if reason is not None else
             "inactive: the worker does not listen (its log says why: inject_listen_failed)")
    line = (f"installed, {state}" if installed else f"not installed (memsync claude-code swap installs it); {state}")
    if installed and not compaction:  # swapped by a memsync from before the compaction entry
        line += ("; no compaction hook (a memory given in a session is held back even after Claude Code compacts "
                 "it): run `memsync claude-code swap` again to add it")
    if counts.prompts:
        line += (f"; last day: {counts.prompts} prompts, {counts.injected} injected, "
                 f"mean {counts.mean_tokens:.0f} tokens")
    active = listening and settings.inject and not misread
    return {"installed": installed, "compaction_hook": compaction, "enabled": settings.inject, "active": active,
            "settings_misread": misread,
            **counts.as_dict(), "line": line}


def _worker_text(w: dict[str, Any]) -> str:
    """The worker's state in words: up (and what it does) or down and why, degraded and why with
    its next retry, and where the record was read from when worker.json could not be written."""
    state = f"up ({_phase_text(w)})" if w.get("up") else f"down ({w.get('reason')})"
    if w.get("up") and w.get("degraded"):
        state += f", degraded: {w.get('last_error')}" + _next_retry(w)
    if w.get("status_unwritable"):
        state += (f" (worker.json cannot be written, {w['status_unwritable']}: read from the record the worker "
                  "keeps in place in worker.heartbeat)")
    return state


def _next_retry(w: dict[str, Any]) -> str:
    """When a degraded worker tries again (``worker.json``'s ``next_retry_ms``), in words."""
    due = w.get("next_retry_ms")
    return f"; next retry at {utc_stamp(due)}" if isinstance(due, int) else ""


def _phase_text(w: dict[str, Any]) -> str:
    """What a running worker is doing, from ``worker.json``: starting, its first pass (with the
    rows compared so far) or following the database (a file from before phases: following)."""
    phase = str(w.get("phase", PHASE_FOLLOWING))
    if phase == PHASE_FIRST_PASS:
        done = f"{phase} in progress, {int(w.get('pass_rows_done') or 0)} rows done"
        first = w.get("first_sync")
        phase = done if not isinstance(first, dict) else f"{done}; {first_sync_text(first)}"
    waiting = w.get("waiting_on")
    if isinstance(waiting, dict) and isinstance(waiting.get("since_ms"), int):
        since = max(0.0, (int(w.get("heartbeat_ms") or 0) - waiting["since_ms"]) / 1000)
        phase += f"; waiting on {waiting.get('what')} for {since:.0f} s (at most {waiting.get('up_to_s')} s)"
    return phase


def first_sync_text(first: dict[str, Any]) -> str:
    """The first pass's figures (``worker.json`` ``first_sync``, from ``worker.pipeline.progress``) in words:
    how far back search by meaning reaches, what is left, the rate, and when the default window
    and all of it will be done."""
    since = first.get("searchable_from_ms")
    reach = f"searchable by meaning back to {utc_stamp(since)}" if since else "nothing searchable by meaning yet"
    docs = first.get("documents_left")
    left = f"{first.get('rows_left', 0)} rows" + ("" if docs is None else f" (~{docs} documents)") + " left"
    window = days_text(int(first.get("window_days") or 0))
    return (f"{reach}; {left} at {first.get('docs_per_s', 0)} documents/s; "
            f"the {window} done in {_duration(first.get('eta_window_s'))}, all in {_duration(first.get('eta_all_s'))}")


def _duration(seconds: object) -> str:
    """An ETA in words: ``now``, ``~45 s``, ``~12 min``, ``~3.2 h``; ``unknown`` before a rate."""
    if not isinstance(seconds, (int, float)):
        return "unknown"
    if seconds <= 0:
        return "now"
    return f"~{seconds:.0f} s" if seconds < 90 else f"~{seconds / 60:.0f} min" if seconds < 5400 else \
        f"~{seconds / 3600:.1f} h"


def _upstream_result(result: SyncResult) -> str:
    up = result.upstream
    return "" if up is None else f"\nupstream store {up.collection}: {up.line()} ({up.seconds:.1f}s)"


def _upstream_lines(up: dict[str, Any]) -> list[str]:
    if not up.get("enabled"):
        return []
    told = [f"CLAUDE_MEM_CHROMA_MODE=remote CLAUDE_MEM_CHROMA_HOST={up['host']} CLAUDE_MEM_CHROMA_PORT={up['port']}"]
    if up.get("ssl"):
        told.append("CLAUDE_MEM_CHROMA_SSL=true")
    if up.get("tenant", DEFAULT_TENANT) != DEFAULT_TENANT:
        told.append(f"CLAUDE_MEM_CHROMA_TENANT={up['tenant']}")
    if up.get("database", DEFAULT_DATABASE) != DEFAULT_DATABASE:
        told.append(f"CLAUDE_MEM_CHROMA_DATABASE={up['database']}")
    if up.get("api_key"):
        told.append("CLAUDE_MEM_CHROMA_API_KEY=(memsync's chroma_api_key)")  # a secret: never printed
    return [f"upstream store: {up['collection']}, {up['documents']} documents; claude-mem reads it with "
            + " ".join(told), *([up["writers"]["line"]] if "writers" in up else [])]


def _store_line(store: dict[str, Any]) -> str:
    if not store.get("known"):
        return "not read yet (the worker reads its count)"
    line = f"{store['documents']} documents, read {utc_stamp(store['read_at_ms'])}"
    if store["missing"]:
        line += f"; {store['missing']} missing (pending: the worker re-drives them)"
    if store["extra"]:
        line += f"; {store['extra']} without a sync record (the worker checks them)"
    if store.get("index_loading_ms") is not None:
        line += (f"; index loading for {store['index_loading_ms'] / 1000:.0f}s (until it is loaded, searches "
                 "without a window answer lexically; windowed ones use the vector copy)")
    elif store.get("index_loaded_in_ms") is not None:
        line += f"; index loaded (in {store['index_loaded_in_ms'] / 1000:.1f}s)"
    return line


def _text_index_line(state: dict[str, Any]) -> str:
    if not state.get("enabled"):
        return "off (lexical searches: FTS5)"
    if state.get("damaged"):
        who = ("the worker rebuilds it" if state.get("rebuilding", True)
               else "no worker is running to rebuild it (`memsync worker --once` does)")
        return f"damaged ({state['damaged']}); {who}; lexical searches use FTS5 meanwhile"
    if state.get("failing"):
        used = (f"searches use it as last refreshed, {state['pending_rows']} newer rows through FTS5"
                if state.get("built") else "lexical searches use FTS5")
        return (f"failing ({state['failing']}): the worker's refreshes fail, {used}; "
                "the worker's log has each new reason (text_index_failed)")
    if not state.get("built"):
        return "not built yet (the worker builds it); lexical searches use FTS5 meanwhile"
    behind = state["pending_rows"]
    return "up to date" if behind == 0 else f"{behind} rows behind (searched through FTS5 meanwhile)"


def _copy_line(state: dict[str, Any]) -> str:
    if not state.get("enabled"):
        return "off"
    if state.get("damaged"):
        return f"damaged ({state['damaged']}); not used, the worker rebuilds it from Chroma"
    if not state.get("present"):
        return "none yet (the worker fills it)"
    done = "complete" if state["complete"] else "filling, not used until complete"
    return f"{state['documents']} documents, {done}"


def _searchable_line(settings: Settings) -> Callable[[int, str], None]:
    """The one line the worker prints for a person once search is usable (logs stay as they are,
    on stderr): how many documents are searchable, and the next command to try."""
    from memsync.commands.db import DEMO_QUERIES
    from memsync.config.formats.database_owner import is_demo

    # The command as it was started (`make run` starts .venv/bin/memsync), so the line can be pasted.
    me = sys.argv[0] if "/" in sys.argv[0] and not os.path.isabs(sys.argv[0]) else "memsync"
    query = DEMO_QUERIES[0] if is_demo(settings) else "what did we decide about"

    def say(documents: int, what: str) -> None:
        click.echo(f"memsync: search is ready: {documents:,} documents searchable, {what}. "
                   f"Try: {me} search {shlex.quote(query)} (and {me} status)")
        sys.stdout.flush()

    return say


@click.command()
@common_options
@click.option("--once", is_flag=True, help="One full reconcile pass, then exit (for cron and scripts).")
@click.option("--poll-interval", type=float, default=None,
              help=f"Seconds between checks for new rows {settings_note('poll_interval_s')}.")
@click.option("--reconcile-interval", type=float, default=None,
              help="Seconds between full comparisons that find edits and deletes "
                   f"{settings_note('reconcile_interval_s')}.")
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
    from memsync.worker.loop import Worker

    with errors_as_exit(settings):
        if once:
            with graceful_stop() as stop:
                result = Worker(settings, metrics_port=metrics_port, stop=stop).once()
            click.echo(f"{result.line()} ({result.rows} rows, {result.seconds:.1f}s)" + _upstream_result(result))
            sys.exit(EXIT_FAIL if result.interrupted else EXIT_OK)
        daemon = Worker(settings, metrics_port=metrics_port, on_searchable=_searchable_line(settings))
        daemon.install_signals()
        # Claude Code's per-prompt hook is answered by this process (a thread; it never stops the sync).
        from memsync.config.formats.database_owner import claim
        from memsync.servers.inject_listener import start_listener

        claim(settings, create=True)  # a worker of another database must not answer this directory's hook
        listener = start_listener(settings)
        try:
            sys.exit(daemon.run())
        finally:
            if listener is not None:
                listener.stop()
