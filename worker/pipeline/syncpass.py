"""One full sync pass over every collection memsync writes, the sequence ``worker --once`` and
``resync`` run (:meth:`SyncPass.whole`) and whose steps the daemon schedules itself (each reconcile
and tail pass); each caller only supplies what differs (an :class:`Opening`): how it opens what it
writes (the daemon keeps its connection, ``resync`` opens one and may build a new generation), how
it repairs a collection Chroma cannot read, and what it does with each result.

The sequence: what the pass writes opened, the records checked against the stores
(:meth:`SyncPass.check`; a damaged collection repaired, then checked again), memsync's own
collection synced (its vector copy written beside it by a ``MirroredSink``), then, with
``upstream_store`` on and the first pass through, the upstream-readable store (``worker.pipeline.upstream``:
claude-mem's derivation, the bundled model's vectors, mostly from the embedding store since its
texts were just embedded), and last the embedding store's garbage collected when a pass may have
left some (:class:`StoreCollection`: the daemon defers that to an idle step). Each collection's
result is handed to the caller as it ends, so a failure of the second leaves the first one counted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from memsync.config.claude_mem.schema import Kind
from memsync.config.errors import StoreDamaged
from memsync.config.formats.first_sync import Cursor, every_kind
from memsync.config.settings import Settings
from memsync.embedding import Embedder, upstream_embedder
from memsync.worker.pipeline.frontier import Frontier
from memsync.worker.pipeline.sink import ChromaSink, MirroredSink, VectorSink
from memsync.worker.pipeline.sync import Destination, Syncer, SyncOptions, SyncResult
from memsync.worker.pipeline.target import StoreCheck, check_store
from memsync.worker.pipeline.upstream import UPSTREAM
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.state import SyncState
from memsync.worker.stores.embedstore import EmbeddingStore, collect_garbage
from memsync.worker.stores.vectorcopy import VectorCopyWriter

OnResult = Callable[[SyncResult, bool], None]  # (a collection's result, True for the upstream-readable store)
OpenUpstream = Callable[[], VectorSink | None]  # opens (or gives) the upstream-readable store when its pass is due


@dataclass(frozen=True, slots=True)
class Scope:
    """Which rows a pass compares."""

    full: bool = True  # False: only rows above the records' watermarks (the worker's tail pass)
    project: str | None = None
    dry_run: bool = False  # plan from the records alone: nothing written
    resume: Cursor | None = None  # a full pass that yielded to new rows goes on from here (SyncResult.resume)
    upstream: bool = True  # False: memsync's own collection only (a tail pass inside a yielded full pass)


EVERY_ROW = Scope()  # a full pass over every project, written

@dataclass(frozen=True, slots=True)
class Checked:
    """The records of each collection checked against its store."""

    own: StoreCheck  # memsync's own collection (``worker.json`` reports it)
    repaired: bool  # records of either collection were corrected: a full pass must follow


@dataclass(frozen=True, slots=True)
class Opened:
    """What a caller opened for a pass: memsync's own generation (its name, and its sink with the
    vector copy beside it, None in a dry run) and the upstream-readable collection when it is
    checked with ours (the daemon keeps it open; ``resync`` opens it when its pass is due)."""

    name: str
    sink: MirroredSink | None
    upstream: ChromaSink | None = None


class Opening(Protocol):
    """What differs between the callers of :meth:`SyncPass.whole`."""

    @property
    def embedder(self) -> Embedder:
        """The embedder of memsync's own collection."""
        ...

    def open(self) -> Opened:
        """What the pass writes, connecting first when not connected."""
        ...

    def repair(self, exc: StoreDamaged) -> None:
        """Recreate the collection Chroma cannot read (``worker.pipeline.target.repair_damaged``); the next
        :meth:`open` gives the new one."""
        ...

    def ready(self, checked: Checked | None) -> None:
        """The records are checked (None: a dry run checks nothing) and the pass begins."""
        ...

    def open_upstream(self) -> VectorSink | None:
        """The upstream-readable store, opened when its pass is due (None: a dry run)."""
        ...

    def passed(self, result: SyncResult, upstream: bool) -> None:
        """A collection's pass ended (``OnResult``)."""
        ...


class StoreCollection:
    """Whether the embedding store's garbage (texts no record names any more) should be collected,
    and the collection: the one decision of the daemon (at its next idle step) and a whole pass
    (at its end)."""

    def __init__(self, store: EmbeddingStore | None, due: bool) -> None:
        self.store = store
        self._due = due and store is not None

    def passed(self, full: bool, result: SyncResult) -> None:
        """A collection's pass ended: a whole full one that updated or deleted documents may have
        left garbage (a tail pass only adds)."""
        if full and not result.interrupted and result.churned and self.store is not None:
            self._due = True

    def due(self) -> bool:
        """Whether a collection should run (the daemon: at the next idle step)."""
        return self._due

    def run(self, state: SyncState) -> None:
        """Collect now."""
        self._due = False
        if self.store is not None:
            collect_garbage(self.store, state)


class SyncPass:
    """The pass over memsync's own collection, then the upstream-readable store, for one source."""

    def __init__(self, settings: Settings, reader: SourceReader, state: SyncState, garbage: StoreCollection,
                 options: SyncOptions, upstream_progress: bool = True) -> None:
        self.s, self.reader, self.state, self.options = settings, reader, state, options
        self.garbage, self.store = garbage, garbage.store
        # The worker's progress is the first pass's rows (``worker.json``); a resync's bar counts both passes.
        # The upstream-readable store's pass runs once ours is through, whole: it does not yield.
        self._upstream_options = dataclasses.replace(options, yield_to=None,
                                                     progress=options.progress if upstream_progress else None)

    def check(self, own: ChromaSink, copy: VectorCopyWriter | None, model: str,
              upstream: ChromaSink | None = None) -> Checked:
        """Check memsync's own collection (and the upstream-readable one, when given) against its
        records, aligning them where they differ (``worker.pipeline.target.check_store``)."""
        checked = check_store(self.s, self.state, own, copy, model)
        repaired = checked.repaired
        if upstream is not None:  # its own records, in its own model's vectors
            repaired = self.check_upstream(upstream) or repaired
        return Checked(checked, repaired)

    def open_checked(self, opening: Opening) -> Opened:
        """Open what the pass writes and check its records against it. Trigger: Chroma cannot read a
        collection (StoreDamaged). Why: retrying never helps, and it only holds what the database
        implies. Outcome: it is recreated empty and the new one checked, whose alignment and the
        pass re-derive it."""
        model = opening.embedder.model_id
        opened = opening.open()
        try:
            checked = self._check(opened, model)
        except StoreDamaged as exc:
            opening.repair(exc)
            opened = opening.open()
            checked = self._check(opened, model)
        opening.ready(checked)
        return opened

    def _check(self, opened: Opened, model: str) -> Checked | None:
        if opened.sink is None:
            return None
        return self.check(opened.sink.primary, opened.sink.copy, model, opened.upstream)

    def whole(self, opening: Opening, scope: Scope) -> SyncResult:
        """The whole sequence (see the module docstring): open and check (repairing), sync memsync's
        own collection then the upstream-readable store, and collect the embedding store's garbage
        when a pass may have left some; the first result, with the second's attached."""
        opened = self.open_checked(opening)
        result = self.run(Destination(opened.name, opened.sink), opening.embedder, opening.open_upstream, scope,
                          opening.passed)
        if not result.interrupted and self.garbage.due():
            self.garbage.run(self.state)  # texts no record names any more (edited, deleted, a dropped generation's)
        return result

    def check_upstream(self, upstream: ChromaSink) -> bool:
        """Check the upstream-readable collection against its records; True when they were corrected."""
        return check_store(self.s, self.state, upstream, None, upstream_embedder(self.s).model_id).repaired

    def run(self, own: Destination, embedder: Embedder, upstream: OpenUpstream, scope: Scope,
            on_result: OnResult | None = None) -> SyncResult:
        """Sync memsync's own collection, then (``upstream_store`` on, the first pass through) the
        upstream-readable store, opened by ``upstream`` only then; the first result, with the
        second's attached and its interruption."""
        cursor, frontier = self._frontier(own, scope)
        options = self.options if frontier is None else dataclasses.replace(self.options, moved=frontier.moved)
        first = Syncer(self.reader, self.state, own, embedder, options, self.store).run(
            project=scope.project, dry_run=scope.dry_run, start_after=self._after(own.collection, scope),
            resume=cursor)
        if frontier is not None and cursor is not None:
            frontier.ended(cursor, through=not first.interrupted)
        self.garbage.passed(scope.full, first)
        if on_result is not None:
            on_result(first, False)
        if first.interrupted or not self.s.upstream_store or not scope.upstream:
            return first
        sink = upstream()
        if sink is None and not scope.dry_run:  # its store did not open (logged there): the next pass tries again
            return first
        second = self.upstream(sink, scope)
        self.garbage.passed(scope.full, second)
        if on_result is not None:
            on_result(second, True)
        return dataclasses.replace(first, upstream=second, interrupted=second.interrupted)

    def _frontier(self, own: Destination, scope: Scope) -> tuple[Cursor | None, Frontier | None]:
        """The cursor of a full pass (the scope's when it goes on, else a new one at the top) and,
        when it is (part of) a first sync of every project, its frontier (``worker.pipeline.frontier``)
        written where searches see it."""
        if not scope.full:
            return None, None
        cursor = scope.resume if scope.resume is not None else every_kind()
        if scope.dry_run or scope.project is not None or own.sink is None:
            return cursor, None
        # A cursor at the top is a new pass (the worker hands one in to follow it); any other goes on.
        return cursor, Frontier.begin(self.s.data_dir, self.reader, self.state, own.collection, cursor,
                                      resumed=cursor != every_kind())

    def upstream(self, sink: VectorSink | None, scope: Scope) -> SyncResult:
        """The pass into the upstream-readable store alone (``sink`` None: a dry run from its
        records); its result is logged (``sync_done`` with its collection)."""
        into = Destination(self.s.upstream_collection, sink, UPSTREAM)
        return Syncer(self.reader, self.state, into, upstream_embedder(self.s), self._upstream_options,
                      self.store).run(project=scope.project, dry_run=scope.dry_run,
                                      start_after=self._after(into.collection, scope))

    def _after(self, collection: str, scope: Scope) -> dict[Kind, int] | None:
        return None if scope.full else self.state.watermarks(collection)
