"""One full sync pass over every collection memsync writes, the sequence the daemon (each reconcile
and tail pass, and ``worker --once``) and ``resync`` share; each opens what it writes its own way
(the daemon keeps its connection, ``resync`` opens one and may build a new generation).

The sequence: the records checked against the stores (:meth:`SyncPass.check`), memsync's own
collection synced (its vector copy written beside it by a ``MirroredSink``), then, with
``upstream_store`` on and the first pass through, the upstream-readable store (``worker.upstream``:
claude-mem's derivation, the bundled model's vectors, mostly from the embedding store since its
texts were just embedded). Each collection's result is handed to the caller as it ends, so a
failure of the second leaves the first one counted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from memsync.config.claude_mem.schema import Kind
from memsync.config.embedding import Embedder, upstream_embedder
from memsync.config.settings import Settings
from memsync.worker.embedstore import EmbeddingStore
from memsync.worker.sink import ChromaSink, VectorSink
from memsync.worker.source import SourceReader
from memsync.worker.state import SyncState
from memsync.worker.sync import Destination, Syncer, SyncOptions, SyncResult
from memsync.worker.target import StoreCheck, check_store
from memsync.worker.upstream import UPSTREAM
from memsync.worker.vectorcopy import VectorCopyWriter

OnResult = Callable[[SyncResult, bool], None]  # (a collection's result, True for the upstream-readable store)
OpenUpstream = Callable[[], VectorSink | None]  # opens (or gives) the upstream-readable store when its pass is due


@dataclass(frozen=True, slots=True)
class Scope:
    """Which rows a pass compares."""

    full: bool = True  # False: only rows above the records' watermarks (the worker's tail pass)
    project: str | None = None
    dry_run: bool = False  # plan from the records alone: nothing written


@dataclass(frozen=True, slots=True)
class Checked:
    """The records of each collection checked against its store."""

    own: StoreCheck  # memsync's own collection (``worker.json`` reports it)
    repaired: bool  # records of either collection were corrected: a full pass must follow


class SyncPass:
    """The pass over memsync's own collection, then the upstream-readable store, for one source."""

    def __init__(self, settings: Settings, reader: SourceReader, state: SyncState, store: EmbeddingStore | None,
                 options: SyncOptions, upstream_progress: bool = True) -> None:
        self.s, self.reader, self.state, self.store, self.options = settings, reader, state, store, options
        # The worker's progress is the first pass's rows (``worker.json``); a resync's bar counts both passes.
        self._upstream_options = options if upstream_progress else dataclasses.replace(options, progress=None)

    def check(self, own: ChromaSink, copy: VectorCopyWriter | None, model: str,
              upstream: ChromaSink | None = None) -> Checked:
        """Check memsync's own collection (and the upstream-readable one, when given) against its
        records, aligning them where they differ (``worker.target.check_store``)."""
        checked = check_store(self.s, self.state, own, copy, model)
        repaired = checked.repaired
        if upstream is not None:  # its own records, in its own model's vectors
            repaired = self.check_upstream(upstream) or repaired
        return Checked(checked, repaired)

    def check_upstream(self, upstream: ChromaSink) -> bool:
        """Check the upstream-readable collection against its records; True when they were corrected."""
        return check_store(self.s, self.state, upstream, None, upstream_embedder(self.s).model_id).repaired

    def run(self, own: Destination, embedder: Embedder, upstream: OpenUpstream, scope: Scope,
            on_result: OnResult | None = None) -> SyncResult:
        """Sync memsync's own collection, then (``upstream_store`` on, the first pass through) the
        upstream-readable store, opened by ``upstream`` only then; the first result, with the
        second's attached and its interruption."""
        first = Syncer(self.reader, self.state, own, embedder, self.options, self.store).run(
            project=scope.project, dry_run=scope.dry_run, start_after=self._after(own.collection, scope))
        if on_result is not None:
            on_result(first, False)
        if first.interrupted or not self.s.upstream_store:
            return first
        second = self.upstream(upstream(), scope)
        if on_result is not None:
            on_result(second, True)
        return dataclasses.replace(first, upstream=second, interrupted=second.interrupted)

    def upstream(self, sink: VectorSink | None, scope: Scope) -> SyncResult:
        """The pass into the upstream-readable store alone (``sink`` None: a dry run from its
        records); its result is logged (``sync_done`` with its collection)."""
        into = Destination(self.s.upstream_collection, sink, UPSTREAM)
        return Syncer(self.reader, self.state, into, upstream_embedder(self.s), self._upstream_options,
                      self.store).run(project=scope.project, dry_run=scope.dry_run,
                                      start_after=self._after(into.collection, scope))

    def _after(self, collection: str, scope: Scope) -> dict[Kind, int] | None:
        return None if scope.full else self.state.watermarks(collection)
