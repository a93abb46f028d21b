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

from memsync.chroma import collections as stores
from memsync.config.claude_mem.schema import KINDS
from memsync.config.errors import ConfigError, StoreDamaged
from memsync.config.formats.database_owner import claim
from memsync.config.settings import Settings
from memsync.embedding import Embedder, close_embedder, endpoint_url, make_embedder
from memsync.worker.pipeline.sink import ChromaSink, MirroredSink, VectorSink
from memsync.worker.pipeline.sync import ProgressFn, SyncOptions, SyncResult
from memsync.worker.pipeline.syncpass import EVERY_ROW, Checked, Opened, Scope, StoreCollection, SyncPass
from memsync.worker.pipeline.target import open_upstream_sink, repair_damaged
from memsync.worker.pipeline.upstream import UpstreamSink
from memsync.worker.process import logs
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.state import ACTIVE_COLLECTION, SyncState, now_ms
from memsync.worker.stores.embedstore import EmbeddingStore
from memsync.worker.stores.textsync import TextSync
from memsync.worker.stores.vectorcopy import VectorCopyWriter, drop_copy, fill_from_store, open_writer

DRY_RUN_REBUILD = "(rebuild-dry-run)"


def count_rows(settings: Settings, scope: Scope = EVERY_ROW) -> int:
    """Rows a resync will read (for a progress bar's total): twice each row while the
    upstream-readable store is on (its pass reads them again)."""
    total = 0
    with SourceReader.open(settings) as reader:
        for kind in KINDS:
            refs = reader.row_refs(kind)
            total += sum(1 for r in refs
                         if scope.project is None or scope.project in (r.project, r.merged_into_project))
    return total * (2 if settings.upstream_store and not scope.dry_run else 1)


def resync(
    settings: Settings,
    *,
    scope: Scope = EVERY_ROW,
    rebuild: bool = False,
    stop: threading.Event | None = None,
    progress: ProgressFn | None = None,
    embedder: Embedder | None = None,
) -> SyncResult:
    """Bring the configured Chroma collection in step with the source database, exactly (``scope``:
    one project's rows, or a dry run; always a full comparison). DatabaseMismatch, before anything
    is written, when the data directory belongs to another database."""
    if rebuild and scope.project is not None:
        raise ConfigError("--rebuild re-embeds everything; it cannot be combined with --project")
    claim(settings, create=not scope.dry_run)
    scope, options = dataclasses.replace(scope, full=True), SyncOptions.from_settings(settings, stop, progress)
    if embedder is not None:
        return _resync(settings, embedder, scope, rebuild, options)
    made = make_embedder(settings, wait=stop.wait if stop is not None else None)
    try:
        return _resync(settings, made, scope, rebuild, options)
    finally:
        close_embedder(made)


def upstream_resync(settings: Settings, client: Any, reader: SourceReader, state: SyncState,
                    store: EmbeddingStore | None = None) -> SyncResult:
    """The same exact pass into the upstream-readable store (``worker.pipeline.upstream``) alone, its
    records first checked against the collection; its result is logged (``sync_done`` with its
    collection)."""
    sync = SyncPass(settings, reader, state, StoreCollection(store, due=False), SyncOptions.from_settings(settings))
    return sync.upstream(_open_upstream(sync, client), EVERY_ROW)


def _open_upstream(sync: SyncPass, client: Any) -> UpstreamSink:
    """The upstream-readable collection, opened (created when missing) and checked against its records."""
    sink = open_upstream_sink(client, sync.s, sync.state)
    sync.check_upstream(sink)
    return sink


class _Generation:
    """The generation a resync writes (its ``Opening``, ``worker.pipeline.syncpass``): the active one (made
    active in the records), a new one being built (``rebuild``), or none at all in a dry run. Once
    memsync's own pass is through: its copy completed, a rebuild switched to, the run recorded."""

    def __init__(self, sync: SyncPass, client: Any, embedder: Embedder, rebuild: bool, dry_run: bool,
                 started: int) -> None:
        self.sync, self.client, self.embedder, self.started = sync, client, embedder, started
        self.rebuild, self.dry_run = rebuild, dry_run
        self.copy: VectorCopyWriter | None = None
        self.opened = self._open()

    def _open(self) -> Opened:
        settings, state, embedder, client = self.sync.s, self.sync.state, self.embedder, self.client
        if self.dry_run:
            active = stores.active_collection_name(client, settings)
            return Opened(DRY_RUN_REBUILD if self.rebuild or active is None else active, None)
        if self.rebuild:
            collection = stores.begin_rebuild(client, settings, embedder.model_id, embedder.dimension,
                                              endpoint_url(embedder))
        else:
            collection = stores.open_collection(client, settings, embedder.model_id, embedder.dimension,
                                                endpoint_url(embedder))
            state.set_meta(ACTIVE_COLLECTION, str(collection.name))
        name = str(collection.name)
        self.copy = open_writer(settings, state, name, embedder.model_id, embedder.dimension)
        return Opened(name, MirroredSink(ChromaSink(collection, client.get_max_batch_size()), self.copy))

    def open(self) -> Opened:
        """The generation opened when this resync began (or recreated by :meth:`repair`)."""
        return self.opened

    def repair(self, exc: StoreDamaged) -> None:
        """Recreate the unreadable collection empty (``worker.pipeline.target.repair_damaged``); all of it is
        re-derived."""
        embedder, name = self.embedder, self.opened.name
        repair_damaged(self.sync.s, self.client, exc, embedder.model_id, embedder.dimension, endpoint_url(embedder))
        collection = stores.store_call("open collection", self.client.get_collection, name, embedding_function=None)
        self.opened = Opened(name, MirroredSink(ChromaSink(collection, self.client.get_max_batch_size()), self.copy))

    def ready(self, checked: Checked | None) -> None:
        """Nothing to report: the check logged what it corrected."""

    def open_upstream(self) -> VectorSink | None:
        """The upstream-readable store, opened and checked when its pass is due (none in a dry run)."""
        return None if self.dry_run else _open_upstream(self.sync, self.client)

    def passed(self, result: SyncResult, upstream: bool) -> None:
        """memsync's own generation is through: its copy completed, a rebuild switched to, the run
        recorded; all before the upstream-readable store's pass."""
        if upstream or self.dry_run:
            return
        name, state, mirror = self.opened.name, self.sync.state, self.opened.sink
        if mirror is not None and not result.interrupted:
            _finish_copy(mirror, state)
        if self.rebuild and not result.interrupted:
            old = stores.finish_rebuild(self.client, self.sync.s, name)
            state.set_meta(ACTIVE_COLLECTION, name)
            if old:
                state.drop_collection(old)
                drop_copy(self.sync.s, old)
            logs.get_logger().info(logs.REBUILD_SWITCHED, active=name, dropped=old)
        summary = {k: v for k, v in asdict(result).items() if k != "failures"}
        state.record_run(name, self.started, json.dumps(summary))

    def close(self) -> None:
        """Close the vector copy writer."""
        if self.copy is not None:
            self.copy.close()


def _resync(settings: Settings, embedder: Embedder, scope: Scope, rebuild: bool, options: SyncOptions) -> SyncResult:
    started = now_ms()
    store = None if scope.dry_run else EmbeddingStore.open(settings)
    with SourceReader.open(settings) as reader, \
            SyncState(settings.state_path) as state, stores.connect(settings) as handle, \
            contextlib.closing(store) if store is not None else contextlib.nullcontext():
        # A dry run's bar counts memsync's own rows only (count_rows), as its upstream plan reports none.
        # Texts a rebuild's dropped generation named are garbage at its end, as are those a pass churned.
        sync = SyncPass(settings, reader, state, StoreCollection(store, due=rebuild), options,
                        upstream_progress=not scope.dry_run)
        generation = _Generation(sync, handle.client, embedder, rebuild, scope.dry_run, started)
        try:
            result = sync.whole(generation, scope)
        finally:
            generation.close()
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
