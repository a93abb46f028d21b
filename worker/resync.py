"""The batch resync: open source, state, Chroma and the embedder, run one exact pass, close.

``rebuild`` fills a fresh collection generation while the active one keeps serving searches,
then switches the pointer and drops the old generation; an interrupted rebuild is continued by
the next ``--rebuild`` (its records belong to the generation being built).
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from memsync.worker.sink import ChromaSink
from memsync.worker.source import SourceReader
from memsync.worker.state import ACTIVE_COLLECTION, SyncState, now_ms
from memsync.worker.sync import ProgressFn, Syncer, SyncResult
from memsync.worker.target import check_store, open_upstream_sink, repair_damaged
from memsync.worker.textsync import TextSync
from memsync.worker.upstream import upstream_syncer
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
    if embedder is not None:
        return _resync(settings, embedder, project, rebuild, dry_run, stop, progress)
    made = make_embedder(settings, wait=stop.wait if stop is not None else None)
    try:
        return _resync(settings, made, project, rebuild, dry_run, stop, progress)
    finally:
        close_embedder(made)


def upstream_resync(settings: Settings, client: Any, reader: SourceReader, state: SyncState,
                    store: EmbeddingStore | None = None, project: str | None = None,
                    stop: threading.Event | None = None, progress: ProgressFn | None = None) -> SyncResult:
    """The same exact pass into the upstream-readable store (``worker.upstream``), its records
    first checked against the collection; its result is logged (``sync_done`` with its collection)."""
    sink = open_upstream_sink(client, settings, state)
    syncer = upstream_syncer(settings, reader, sink, state, store, stop, progress)
    check_store(settings, state, sink, None, syncer.embedder.model_id)
    return syncer.run(project=project)


def _resync(settings: Settings, embedder: Embedder, project: str | None, rebuild: bool, dry_run: bool,
            stop: threading.Event | None, progress: ProgressFn | None) -> SyncResult:
    started = now_ms()
    store = None if dry_run else EmbeddingStore.open(settings)
    with SourceReader.open(settings) as reader, \
            SyncState(settings.state_path) as state, stores.connect(settings) as handle, \
            contextlib.closing(store) if store is not None else contextlib.nullcontext():
        client = handle.client
        sink: ChromaSink | None = None
        if dry_run:
            active = stores.active_collection_name(client, settings)
            name = DRY_RUN_REBUILD if rebuild or active is None else active
        elif rebuild:
            collection = stores.begin_rebuild(client, settings, embedder.model_id, embedder.dimension,
                                              endpoint_url(embedder))
            sink, name = ChromaSink(collection, client.get_max_batch_size()), str(collection.name)
        else:
            collection = stores.open_collection(client, settings, embedder.model_id, embedder.dimension,
                                                endpoint_url(embedder))
            sink, name = ChromaSink(collection, client.get_max_batch_size()), str(collection.name)
            state.set_meta(ACTIVE_COLLECTION, name)
        copy = None if sink is None else open_writer(settings, state, name, embedder.model_id, embedder.dimension)
        try:
            if sink is not None:  # records bound to this very collection, its count as they say
                try:
                    check_store(settings, state, sink, copy, embedder.model_id)
                except StoreDamaged as exc:  # unreadable: recreated empty, then all of it re-derived
                    repair_damaged(settings, client, exc, embedder.model_id, embedder.dimension,
                                   endpoint_url(embedder))
                    sink = ChromaSink(stores.store_call("open collection", client.get_collection, name,
                                                 embedding_function=None), client.get_max_batch_size())
                    check_store(settings, state, sink, copy, embedder.model_id)
            syncer = Syncer(reader, sink, state, embedder, collection=name,
                            read_batch_rows=settings.read_batch_rows, batch_size=settings.batch_size, stop=stop,
                            progress=progress, max_row_attempts=settings.max_row_attempts, copy=copy,
                            store=store)
            result = syncer.run(project=project, dry_run=dry_run)
            if syncer.copy is not None and sink is not None and not syncer.copy.complete and not result.interrupted:
                # A generation synced before memsync kept a copy: fill it from Chroma now.
                fill_from_store(syncer.copy, sink.collection, state.acknowledged_ids(name))
            if syncer.copy is not None and syncer.copy.complete and not result.interrupted \
                    and syncer.copy.needs_reorder():
                syncer.copy.reorder()  # a first sync writes kind after kind: put the copy in date order
        finally:
            if copy is not None:
                copy.close()
        if rebuild and not dry_run and not result.interrupted:
            old = stores.finish_rebuild(client, settings, name)
            state.set_meta(ACTIVE_COLLECTION, name)
            if old:
                state.drop_collection(old)
                drop_copy(settings, old)
            logs.get_logger().info(logs.REBUILD_SWITCHED, active=name, dropped=old)
        if not dry_run:
            summary = {k: v for k, v in asdict(result).items() if k != "failures"}
            state.record_run(name, started, json.dumps(summary))
        changed = rebuild or result.updated or result.deleted
        if settings.upstream_store and not result.interrupted:
            up = upstream_syncer(settings, reader, None, state, stop=stop).run(project=project, dry_run=True) \
                if dry_run else upstream_resync(settings, client, reader, state, store, project, stop, progress)
            changed = changed or up.updated or up.deleted
            result = dataclasses.replace(result, upstream=up, interrupted=up.interrupted)
        if store is not None and not result.interrupted and changed:
            # Texts no record names any more (edited, deleted, or only the dropped generation's).
            collect_garbage(store, state)
    if not dry_run:  # memsync's text index too (skipped, with a log line, while a worker holds it)
        text = TextSync(settings)
        try:
            text.step(force_full=True)
        finally:
            text.close()
    return result
