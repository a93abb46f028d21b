"""The batch resync: open source, state, Chroma and the embedder, run one exact pass, close.

``rebuild`` fills a fresh collection generation while the active one keeps serving searches,
then switches the pointer and drops the old generation; an interrupted rebuild is continued by
the next ``--rebuild`` (its records belong to the generation being built).
"""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import asdict
from typing import Any

from memsync.config.chroma import collections as stores
from memsync.config.claude_mem.schema import KINDS
from memsync.config.embedding import Embedder, close_embedder, endpoint_url, make_embedder
from memsync.config.errors import ConfigError, StoreDamaged
from memsync.config.settings import Settings
from memsync.worker import logs
from memsync.worker.embedstore import EmbeddingStore, collect_garbage
from memsync.worker.sink import ChromaSink, MirroredSink
from memsync.worker.source import SourceReader
from memsync.worker.state import ACTIVE_COLLECTION, SyncState, now_ms
from memsync.worker.sync import Destination, ProgressFn, SyncOptions, SyncResult
from memsync.worker.syncpass import Scope, SyncPass
from memsync.worker.target import open_upstream_sink, repair_damaged
from memsync.worker.textsync import TextSync
from memsync.worker.upstream import UpstreamSink
from memsync.worker.vectorcopy import drop_copy, fill_from_store, open_writer

DRY_RUN_REBUILD = "(rebuild-dry-run)"


def count_rows(settings: Settings, project: str | None = None, dry_run: bool = False) -> int:
    """Rows a resync will read (for a progress bar's total): twice each row while the
    upstream-readable store is on (its pass reads them again)."""
    total = 0
    with SourceReader.open(settings) as reader:
        for kind in KINDS:
            refs = reader.row_refs(kind)
            total += sum(1 for r in refs if project is None or project in (r.project, r.merged_into_project))
    return total * (2 if settings.upstream_store and not dry_run else 1)


def resync(
    settings: Settings,
    *,
    project: str | None = None,
    rebuild: bool = False,
    dry_run: bool = False,
    stop: threading.Event | None = None,
    progress: ProgressFn | None = None,
    embedder: Embedder | None = None,
) -> SyncResult:
    """Bring the configured Chroma collection in step with the source database, exactly."""
    if rebuild and project is not None:
        raise ConfigError("--rebuild re-embeds everything; it cannot be combined with --project")
    scope, options = Scope(project=project, dry_run=dry_run), SyncOptions.from_settings(settings, stop, progress)
    if embedder is not None:
        return _resync(settings, embedder, scope, rebuild, options)
    made = make_embedder(settings, wait=stop.wait if stop is not None else None)
    try:
        return _resync(settings, made, scope, rebuild, options)
    finally:
        close_embedder(made)


def upstream_resync(settings: Settings, client: Any, reader: SourceReader, state: SyncState,
                    store: EmbeddingStore | None = None) -> SyncResult:
    """The same exact pass into the upstream-readable store (``worker.upstream``) alone, its
    records first checked against the collection; its result is logged (``sync_done`` with its
    collection)."""
    sync = SyncPass(settings, reader, state, store, SyncOptions.from_settings(settings))
    return sync.upstream(_open_upstream(sync, client), Scope())


def _open_upstream(sync: SyncPass, client: Any) -> UpstreamSink:
    """The upstream-readable collection, opened (created when missing) and checked against its records."""
    sink = open_upstream_sink(client, sync.s, sync.state)
    sync.check_upstream(sink)
    return sink


def _own_sink(settings: Settings, client: Any, embedder: Embedder, state: SyncState, rebuild: bool,
              dry_run: bool) -> tuple[ChromaSink | None, str]:
    """The generation this resync writes, and its name: the active one (made active in the
    records), a new one being built (``rebuild``), or none at all in a dry run."""
    if dry_run:
        active = stores.active_collection_name(client, settings)
        return None, DRY_RUN_REBUILD if rebuild or active is None else active
    if rebuild:
        collection = stores.begin_rebuild(client, settings, embedder.model_id, embedder.dimension,
                                          endpoint_url(embedder))
        return ChromaSink(collection, client.get_max_batch_size()), str(collection.name)
    collection = stores.open_collection(client, settings, embedder.model_id, embedder.dimension,
                                        endpoint_url(embedder))
    state.set_meta(ACTIVE_COLLECTION, str(collection.name))
    return ChromaSink(collection, client.get_max_batch_size()), str(collection.name)


def _resync(settings: Settings, embedder: Embedder, scope: Scope, rebuild: bool, options: SyncOptions) -> SyncResult:
    started = now_ms()
    store = None if scope.dry_run else EmbeddingStore.open(settings)
    with SourceReader.open(settings) as reader, \
            SyncState(settings.state_path) as state, stores.connect(settings) as handle, \
            contextlib.closing(store) if store is not None else contextlib.nullcontext():
        client = handle.client
        # A dry run's bar counts memsync's own rows only (count_rows), as its upstream plan reports none.
        sync = SyncPass(settings, reader, state, store, options, upstream_progress=not scope.dry_run)
        sink, name = _own_sink(settings, client, embedder, state, rebuild, scope.dry_run)
        copy = None if sink is None else open_writer(settings, state, name, embedder.model_id, embedder.dimension)
        try:
            if sink is not None:  # records bound to this very collection, its count as they say
                try:
                    sync.check(sink, copy, embedder.model_id)
                except StoreDamaged as exc:  # unreadable: recreated empty, then all of it re-derived
                    repair_damaged(settings, client, exc, embedder.model_id, embedder.dimension,
                                   endpoint_url(embedder))
                    sink = ChromaSink(stores.store_call("open collection", client.get_collection, name,
                                                        embedding_function=None), client.get_max_batch_size())
                    sync.check(sink, copy, embedder.model_id)
            mirror = None if sink is None else MirroredSink(sink, copy)

            def own_done(result: SyncResult, upstream: bool) -> None:
                """memsync's own generation is through: its copy completed, a rebuild switched to,
                the run recorded; all before the upstream-readable store's pass."""
                if upstream:
                    return
                if mirror is not None and not result.interrupted:
                    _finish_copy(mirror, state)
                if rebuild and not scope.dry_run and not result.interrupted:
                    old = stores.finish_rebuild(client, settings, name)
                    state.set_meta(ACTIVE_COLLECTION, name)
                    if old:
                        state.drop_collection(old)
                        drop_copy(settings, old)
                    logs.get_logger().info(logs.REBUILD_SWITCHED, active=name, dropped=old)
                if not scope.dry_run:
                    summary = {k: v for k, v in asdict(result).items() if k != "failures"}
                    state.record_run(name, started, json.dumps(summary))

            result = sync.run(Destination(name, mirror), embedder,
                              lambda: None if scope.dry_run else _open_upstream(sync, client), scope, own_done)
        finally:
            if copy is not None:
                copy.close()
        if store is not None and not result.interrupted and (rebuild or result.churned):
            # Texts no record names any more (edited, deleted, or only the dropped generation's).
            collect_garbage(store, state)
    if not scope.dry_run:  # memsync's text index too (skipped, with a log line, while a worker holds it)
        text = TextSync(settings)
        try:
            text.step(force_full=True)
        finally:
            text.close()
    return result


def _finish_copy(mirror: MirroredSink, state: SyncState) -> None:
    """After a whole pass: a copy still in use is filled from Chroma when it is incomplete (a
    generation synced before memsync kept a copy) and put in date order when it needs it (a first
    sync writes kind after kind)."""
    copy = mirror.copy
    if copy is not None and not copy.complete:
        fill_from_store(copy, mirror.primary.collection, state.acknowledged_ids(mirror.name))
    if copy is not None and copy.complete and copy.needs_reorder():
        copy.reorder()
