"""Status: per kind and project, rows in SQLite against documents acknowledged in Chroma.

Reads only the source database (read-only) and memsync's own files (sync records, text index
meta, vector copy, ``worker.json``); Chroma need not be running.
``pending`` counts rows that have no sync record yet (new since the last pass); edits are found
by the next pass's hash comparison, not here.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.formats.database_owner import claim
from memsync.config.formats.text_index import (
    index_path,
    meta_unreadable,
    read_meta,
    source_id,
    text_columns,
    unreadable,
)
from memsync.config.formats.vector_copy import Manifest, copy_dir, damage, open_arrays, vectors_damage
from memsync.config.formats.worker_status import DEFAULT_MAX_LAG_S, PHASE_FOLLOWING, worker_state
from memsync.config.kinds import plural
from memsync.config.settings import MULTILINGUAL_PROVIDER, Settings
from memsync.worker.pipeline.writers import upstream_writers
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.state import ACTIVE_COLLECTION, FAILED, SyncState, now_ms
from memsync.worker.rows.tail import oldest_pending_ms

CJK_SUGGEST_SHARE = 0.05  # rows holding CJK text from which status suggests the multilingual model
CJK_SAMPLE_ROWS = 2000  # the newest rows of each kind looked at for it


@dataclass
class Bucket:
    """Counts for one (kind, project)."""

    rows: int = 0
    synced_rows: int = 0
    documents: int = 0
    pending: int = 0
    failed: int = 0
    last_sync_ms: int | None = None

    def add_sync_time(self, ts: int | None) -> None:
        """Keep the newest sync time."""
        if ts is not None and (self.last_sync_ms is None or ts > self.last_sync_ms):
            self.last_sync_ms = ts


@dataclass
class StatusReport:
    """Status of every kind and project, plus the failures and the last run."""

    collection: str | None
    schema_version: int | None = None  # claude-mem's recorded migration level of the database
    buckets: dict[str, dict[str, Bucket]] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    last_run: dict[str, Any] | None = None
    worker: dict[str, Any] = field(default_factory=dict)
    lag_ms: int = 0
    pending_rows: int = 0
    text_index: dict[str, Any] = field(default_factory=dict)
    vector_copy: dict[str, Any] = field(default_factory=dict)
    store: dict[str, Any] = field(default_factory=dict)
    upstream: dict[str, Any] = field(default_factory=dict)
    languages: dict[str, Any] = field(default_factory=dict)
    # Rows the excluded projects leave out, by the excluded project (a row's own, else the one it
    # was merged into): synced with no documents, which the table alone does not explain.
    left_out: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "collection": self.collection,
            "schema_version": self.schema_version,
            "kinds": {k: {p: vars(b) for p, b in sorted(projects.items())} for k, projects in self.buckets.items()},
            "totals": {k: vars(self.total(k)) for k in self.buckets},
            "failures": self.failures,
            "last_run": self.last_run,
            "worker": self.worker,
            "lag_ms": self.lag_ms,
            "pending_rows": self.pending_rows,
            "text_index": self.text_index,
            "vector_copy": self.vector_copy,
            "store": self.store,
            "languages": self.languages,
            "upstream": self.upstream,
        }

    def starting(self) -> bool:
        """Whether the worker is up and still in its first pass (``phase`` other than following)."""
        return bool(self.worker.get("up")) and self.worker.get("phase", PHASE_FOLLOWING) != PHASE_FOLLOWING

    def total(self, kind: str) -> Bucket:
        """The sum over projects of one kind."""
        out = Bucket()
        for b in self.buckets.get(kind, {}).values():
            out.rows += b.rows
            out.synced_rows += b.synced_rows
            out.documents += b.documents
            out.pending += b.pending
            out.failed += b.failed
            out.add_sync_time(b.last_sync_ms)
        return out


def text_index_state(settings: Settings, max_ids: dict[Kind, int]) -> dict[str, Any]:
    """memsync's text index: whether it is on and built for this database, how many rows (by id)
    it trails the database (search reads those trailing rows from FTS5 meanwhile), and which index
    answers lexical searches (``answers``) and why (``why``): FTS5 while it is not built or cannot
    be read (``damaged``: the worker rebuilds it; :func:`status` adds ``rebuilding``, whether a
    worker is up to do so)."""
    if not settings.text_index:
        return {"enabled": False, "answers": "FTS5", "why": "the text index is off"}
    path = index_path(settings)
    meta = read_meta(path)
    if meta is None or meta.get("db") != source_id(settings.db):
        if meta_unreadable(path):
            return {"enabled": True, "built": False, "damaged": "its meta file is unreadable", "answers": "FTS5",
                    "why": "the text index is damaged; the worker rebuilds it"}
        return {"enabled": True, "built": False, "answers": "FTS5", "why": "the text index is not built yet"}
    marks = {k: int(meta.get("kinds", {}).get(k.value, {}).get("max_id", 0)) for k in KINDS}
    out: dict[str, Any] = {"enabled": True, "built": True, "max_ids": {k.value: marks[k] for k in KINDS},
                           "pending_rows": sum(max(0, max_ids[k] - marks[k]) for k in KINDS),
                           "answers": "text index", "why": None}
    damaged = unreadable(path)
    if damaged is not None:
        out.update(damaged=damaged, answers="FTS5", why="the text index cannot be read; the worker rebuilds it")
    return out


def vector_copy_state(settings: Settings, collection: str | None) -> dict[str, Any]:
    """The worker's vector copy of the active collection: live documents and whether it is
    complete (only a complete copy answers searches; an incomplete one is being filled) or
    ``damaged`` (its files disagree with its manifest: not used, the worker rebuilds it)."""
    if not settings.vector_copy:
        return {"enabled": False}
    directory = copy_dir(settings, collection) if collection else None
    manifest = Manifest.read(directory) if directory else None
    if directory is None or manifest is None:
        return {"enabled": True, "present": False}
    reason = damage(directory, manifest)[0] or vectors_damage(directory, manifest)  # 120 MB read: ~90 ms at 313k
    arrays = open_arrays(directory, manifest) if reason is None else None
    if reason is not None or arrays is None:
        return {"enabled": True, "present": True, "complete": False, "documents": 0,
                "damaged": reason or "its files cannot be mapped"}
    live = int(arrays[1]["live"].sum())
    return {"enabled": True, "present": True, "complete": manifest.complete, "documents": live}


def store_state(worker: dict[str, Any], now: int, reconcile_interval_s: float) -> dict[str, Any]:
    """The vector store beside the sync records, as the worker last read both (``worker.json``;
    status itself never asks Chroma). Documents the records hold but the store lacks are
    ``missing``: pending until the worker's repair re-drives them, never counted as synced.
    ``stuck`` when the two have differed for longer than one reconcile interval (a repair should
    have run by then; an in-flight batch differs only for a moment)."""
    count, records = worker.get("store_documents"), worker.get("records_documents")
    if not isinstance(count, int) or not isinstance(records, int):
        return {"known": False}
    since = worker.get("store_differs_since_ms")
    differing_ms = now - int(since) if isinstance(since, int) else 0
    loading = worker.get("index_loading_since_ms")
    return {"known": True, "documents": count, "records": records, "read_at_ms": worker.get("store_read_at_ms"),
            "missing": max(0, records - count), "extra": max(0, count - records),
            "differs_since_ms": since, "repairs": int(worker.get("store_repairs") or 0),
            "stuck": differing_ms > reconcile_interval_s * 1000,
            "index_loading_ms": now - int(loading) if isinstance(loading, int) and worker.get("up") else None,
            "index_loaded_in_ms": worker.get("index_loaded_in_ms")}


def upstream_state(settings: Settings, state: SyncState) -> dict[str, Any]:
    """The upstream-readable store (``worker.pipeline.upstream``): its collection, the documents its records
    hold, where claude-mem reaches it (``host``/``port``: managed mode's recorded server, else
    the configured one), and who writes it (``writers``: ``worker.pipeline.writers``)."""
    if not settings.upstream_store:
        return {"enabled": False}
    from memsync.chroma.remote import endpoint
    from memsync.chroma.server import ServerInfo

    info = ServerInfo.read(settings.data_dir) if settings.chroma_mode == "managed" else None
    port = info.port if info is not None else (settings.server_port if settings.chroma_mode == "managed"
                                               else settings.chroma_port)
    name = settings.upstream_collection
    ep = endpoint(settings, settings.chroma_host, port)  # managed: loopback, plain HTTP, default tenant
    out = {"enabled": True, "collection": name, "documents": state.live_docs(name), "host": ep.host,
           "port": ep.port, "ssl": ep.ssl, "tenant": ep.tenant, "database": ep.database,
           "api_key": settings.chroma_mode == "http" and settings.chroma_api_key is not None}
    return {**out, "writers": upstream_writers(True, out)}


def language_state(settings: Settings, reader: SourceReader) -> dict[str, Any]:
    """How many of the newest rows hold CJK text, and the multilingual model suggested when they
    are at least CJK_SUGGEST_SHARE of them and the bundled model is configured: it reads English
    only, so such memory is found by its words alone (an ``openai`` model may well read them)."""
    looked = [reader.cjk_rows(kind, text_columns(kind), CJK_SAMPLE_ROWS) for kind in KINDS]
    rows, cjk_rows = sum(n for n, _ in looked), sum(c for _, c in looked)
    share = cjk_rows / rows if rows else 0.0
    out: dict[str, Any] = {"rows": rows, "cjk_rows": cjk_rows, "cjk_share": round(share, 4), "suggestion": None}
    if share >= CJK_SUGGEST_SHARE and settings.embedding_provider == "local":  # an openai model may read them
        out["suggestion"] = (f"{share:.0%} of the newest rows hold Chinese, Japanese or Korean text, which the "
                             "bundled English model does not read: install 'memsync[multilingual]', set "
                             f"embedding_provider={MULTILINGUAL_PROVIDER} for the worker and the search servers, "
                             "and run `memsync resync --rebuild` (a running worker follows the new generation)")
    return out


def status(settings: Settings, failures_limit: int = 50) -> StatusReport:
    """Build the status report from the source database and the sync records (DatabaseMismatch
    when the data directory belongs to another database: its records would give a bogus lag)."""
    claim(settings)
    with SyncState(settings.state_path) as state:
        collection = state.get_meta(ACTIVE_COLLECTION)
        marks = state.watermarks(collection) if collection else {}
        docs = state.doc_counts(collection) if collection else []
        rows = state.row_statuses(collection) if collection else []
        last = state.last_run(collection) if collection else None
        upstream = upstream_state(settings, state)
    doc_by_key = {(k, sid): (n, ts) for k, sid, n, ts in docs}
    row_by_key = {(k, sid): (st, reason, attempts, ts) for k, sid, st, reason, attempts, ts in rows}
    report = StatusReport(collection=collection, upstream=upstream)
    with SourceReader.open(settings) as reader:
        report.schema_version = reader.schema_version()
        for kind in KINDS:
            per_project: dict[str, Bucket] = defaultdict(Bucket)
            for ref in reader.row_refs(kind):
                b = per_project[ref.project or "(none)"]
                b.rows += 1
                # its own project when that is excluded, else the one it was merged into when that is
                names = (ref.project, ref.merged_into_project)
                if left := next((p for p in names if reader.exclusion.excluded(p)), ""):
                    report.left_out[left] = report.left_out.get(left, 0) + 1
                key = (kind.value, ref.id)
                n, ts = doc_by_key.get(key, (0, None))
                b.documents += n
                b.add_sync_time(ts)
                row = row_by_key.get(key)
                if row is None:
                    b.pending += 1
                elif row[0] == FAILED:
                    b.failed += 1
                    if len(report.failures) < failures_limit:
                        report.failures.append({"kind": kind.value, "id": ref.id, "reason": row[1], "attempts": row[2]})
                else:
                    b.synced_rows += 1
                    b.add_sync_time(row[3])
            report.buckets[plural(kind)] = dict(per_project)
        above = {k: marks.get(k, 0) for k in KINDS}
        max_ids = reader.max_ids()
        # Rows without a record, counted above: a full pass goes newest first, so rows below the
        # watermarks can be pending too (a first sync under way).
        report.pending_rows = sum(b.pending for per_kind in report.buckets.values() for b in per_kind.values())
        oldest = oldest_pending_ms(reader, above)
        report.lag_ms = max(0, now_ms() - oldest) if oldest is not None else 0
        report.text_index = text_index_state(settings, max_ids)
        report.languages = language_state(settings, reader)
    report.vector_copy = vector_copy_state(settings, collection)
    report.worker = worker_state(settings.data_dir, now_ms(), settings.db)
    failing = report.worker.get("text_index_error") if report.worker.get("up") else None
    if failing and report.text_index.get("enabled"):
        # The worker's last refresh failed: the index is not kept up. A built one still answers up
        # to its last refresh (newer rows through FTS5); ``answers`` stays what the files say.
        report.text_index.update(failing=failing, why="the worker's refreshes of the text index fail")
    if report.text_index.get("damaged"):
        # Only a running worker rebuilds it unasked: without one, say what does.
        report.text_index["rebuilding"] = bool(report.worker.get("up"))
        if not report.worker.get("up"):
            report.text_index["why"] = ("the text index is damaged; no worker is running to rebuild it "
                                        "(`memsync worker`, or `memsync worker --once`, does)")
    report.store = store_state(report.worker, now_ms(), settings.reconcile_interval_s)
    if last:
        report.last_run = {"finished_at_ms": last[0], **json.loads(last[1])}
    return report


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether the worker is healthy, and each problem in words when it is not (one
    verdict for ``memsync status --check`` and ``/api/status``)."""

    problems: tuple[str, ...]

    @property
    def healthy(self) -> bool:
        """No problem found."""
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form: ``healthy`` and the ``problems``."""
        return {"healthy": self.healthy, "problems": list(self.problems)}


def verdict(report: StatusReport, max_lag_s: float = DEFAULT_MAX_LAG_S) -> Verdict:
    """The health verdict on a status report: unhealthy when the worker is down, the lag exceeds
    ``max_lag_s``, Chroma refuses the worker, or the store and the sync records have differed for
    over one reconcile interval. Until its first pass is through, a worker is working off the
    history it found: its lag is that backlog's age, not a delay, so it is not checked
    then, and being degraded is a problem instead."""
    w = report.worker
    starting = report.starting()
    problems = []
    if not w.get("up"):
        problems.append(f"worker down ({w.get('reason')})")
    if report.lag_ms > max_lag_s * 1000 and not starting:
        problems.append(f"lag {report.lag_ms / 1000:.1f}s > {max_lag_s:g}s")
    if starting and w.get("degraded"):
        problems.append(f"worker degraded in its {w.get('phase')}: {w.get('last_error')}")
    if w.get("up") and w.get("chroma_refused"):
        problems.append(f"Chroma refuses the worker: {w['chroma_refused']}")
    store = report.store
    if store.get("stuck"):
        problems.append(f"the vector store holds {store['documents']} documents, the sync records "
                        f"{store['records']}, for over one reconcile interval")
    return Verdict(tuple(problems))
