"""One sync pass: source rows → documents → compare with sync records → embed → upsert/delete.

Exact and idempotent (own sync records, upsert only): every row's documents are compared by content
hash with the records; unchanged ones are neither embedded nor written; documents whose text is
unchanged but whose metadata changed (a project merge) get a metadata update without embedding;
documents that vanished (a deleted row, a shrunk facts list) are deleted once. Rows are taken in id
ranges, and records are compared per range, so rows deleted anywhere, including past the last
row, are found. A range is first compared by its rows' hashes, computed in SQL, with its records:
when they agree it is done without reading a row into Python (a reconcile of an unchanged
database); otherwise its rows are read and compared one by one. Records are written only after
Chroma acknowledged, so a crash at any point replays at most the batch in flight and never leaves
an orphan unaccounted for. Documents to embed are first looked up in the embedding store
(``worker.stores.embedstore``): a text already embedded by the same model, in this pass or any earlier
one, is not embedded again.

Embedding (CPU, the sync thread) overlaps writing (I/O, one upsert thread per pass with its own
connection to the records): a chunk's upsert and records, and a batch's finish (its rows marked
once every chunk is acknowledged), run on the upsert thread in order, while the sync thread reads,
plans and embeds the next. At most one chunk is in flight. What follows a batch's finish (a full
pass's cursor moving) happens only once it resolved, and a pass returns only when every write it
started has.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.formats.first_sync import INF_ID, Cursor
from memsync.config.settings import Settings
from memsync.embedding import Embedder
from memsync.worker.loop import logs
from memsync.worker.pipeline.documents import OWN, Derivation, Document, RowError, SourceRow, row_values_hash
from memsync.worker.pipeline.sink import RejectedBatch, VectorSink
from memsync.worker.pipeline.source import SourceReader
from memsync.worker.pipeline.state import FAILED, SYNCED, DocRecord, RowFailed, RowRecord, RowSynced, SyncState
from memsync.worker.stores.embedstore import BatchVectors, Busy, EmbeddingStore, store_model

# While a full pass may yield to new rows, it asks between chunks that hold about this much
# embedding each, so that a row committed meanwhile waits at most about this long for the pass to
# let it through, also in the middle of a range.
YIELD_CHUNK_S = 1.0
MIN_CHUNK_DOCS = 8
FIRST_CHUNK_DOCS = 32  # a pass's first chunk that may yield, before its embedding rate is known
# ...and its ranges hold about this much work each. A range's documents are embedded sorted by
# length as a whole: ranges of one chunk sort too few texts, so their model calls pad more and are
# more. The model calls of a first sync at 5,000 rows took 0.93 of the time with ranges of 8 s
# than with ranges of 1 s (padded tokens 1.037 against 1.088 of the texts' own; docs/benchmarks.md,
# "Time to useful").
YIELD_RANGE_S = 8.0
MIN_RANGE_ROWS = 8
FIRST_RANGE_ROWS = 32  # a kind's first range of such a pass, before its rate is known
# Chunks embedded ahead of the upsert thread. With one, the model waited for Chroma whenever an
# upsert took longer than the next chunk's embedding (7 % of a first sync at 10,000 rows, sampled
# with py-spy): its HNSW inserts share the cores with the model, so their time varies. A few
# chunks of slack keep the model busy while Chroma keeps up on average (docs/benchmarks.md,
# "Time to useful"); what is in flight is written before anything else touches the sink.
CHUNKS_IN_FLIGHT = 3

_T = TypeVar("_T")
ProgressFn = Callable[[int, int], None]  # (rows processed, documents embedded) since last call
YieldFn = Callable[[], bool]  # asked between a full pass's ranges: True when new rows wait
MovedFn = Callable[[Cursor], None]  # a full pass's cursor after a range (rows above it are compared)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one batch did, in documents (rows where named); a pass's is the sum of its batches'
    (``+``), so no count is shared between the sync thread and the upsert thread."""

    added: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    embedded: int = 0  # texts embedded
    reused: int = 0  # documents written with a stored vector or one of an identical text: no embedding
    rows: int = 0
    failed_rows: int = 0
    embed_seconds: float = 0.0
    upsert_seconds: float = 0.0
    read_seconds: float = 0.0
    store_seconds: float = 0.0  # lookups and writes of the embedding store
    failures: tuple[tuple[str, int, str], ...] = ()  # (kind, row id, reason)
    interrupted: bool = False  # stopped before the end

    def __add__(self, other: Outcome) -> Outcome:
        summed = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(Outcome)
                  if f.name != "interrupted"}
        return Outcome(**summed, interrupted=self.interrupted or other.interrupted)


STOPPED = Outcome(interrupted=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncResult(Outcome):
    """What one pass did: its batches' outcomes summed, with the collection it wrote and its time."""

    collection: str
    seconds: float = 0.0
    dry_run: bool = False
    upstream: SyncResult | None = None  # the same pass into the upstream-readable store, when on
    # A full pass that yielded to new rows (``SyncOptions.yield_to``): where it goes on (``interrupted``
    # is set too, as for any pass that did not reach its end).
    resume: Cursor | None = None

    @classmethod
    def of(cls, collection: str, outcome: Outcome, seconds: float, dry_run: bool) -> SyncResult:
        """A pass's result from the sum of its batches' outcomes."""
        return cls(collection=collection, seconds=seconds, dry_run=dry_run,
                   **{f.name: getattr(outcome, f.name) for f in fields(Outcome)})

    @property
    def written(self) -> int:
        """Documents written to Chroma (upserted, updated or deleted)."""
        return self.added + self.updated + self.deleted

    @property
    def churned(self) -> bool:
        """Documents were updated or deleted, here or in the upstream-readable store's pass: texts
        the embedding store keeps may no longer be named by any record."""
        return bool(self.updated or self.deleted or (self.upstream is not None and self.upstream.churned))

    def line(self) -> str:
        """The human summary, e.g. ``0 added, 0 updated, 0 deleted, 120 unchanged``."""
        text = f"{self.added} added, {self.updated} updated, {self.deleted} deleted, {self.unchanged} unchanged"
        if self.failed_rows:
            text += f", {self.failed_rows} failed rows"
        return text


@dataclass(frozen=True, slots=True)
class SyncOptions:
    """How a pass runs: its batch sizes and the attempts a row gets (from settings, in
    :meth:`from_settings` only), the event that stops it and who is told of its progress."""

    read_batch_rows: int = 500
    batch_size: int = 256
    max_row_attempts: int = 3
    stop: threading.Event = field(default_factory=threading.Event)
    progress: ProgressFn | None = None
    yield_to: YieldFn | None = None  # the worker's: a full pass lets rows committed meanwhile go first
    moved: MovedFn | None = None  # told where a full pass is after each of its ranges (worker.pipeline.frontier)
    busy: Busy | None = None  # the worker's: told of each model call in flight (its heartbeat)

    @classmethod
    def from_settings(cls, settings: Settings, stop: threading.Event | None = None,
                      progress: ProgressFn | None = None, yield_to: YieldFn | None = None,
                      busy: Busy | None = None) -> SyncOptions:
        """The options ``settings`` give, with a stop event (a new one when None), a progress
        callback and (the worker's steps) what a full pass yields to and who is told of each
        model call in flight."""
        return cls(read_batch_rows=settings.read_batch_rows, batch_size=settings.batch_size,
                   max_row_attempts=settings.max_row_attempts, stop=stop or threading.Event(), progress=progress,
                   yield_to=yield_to, busy=busy)


@dataclass(frozen=True, slots=True)
class Destination:
    """What a pass writes: a collection generation's name, its sink (None: a dry run, planned from
    the records alone) and how rows become its documents."""

    collection: str
    sink: VectorSink | None
    derivation: Derivation = OWN


@dataclass
class _Plan:
    """What a batch needs: documents to embed, to re-label, to delete; rows to mark; and what
    planning alone counted. Built and used on the sync thread only."""

    embed: list[Document] = field(default_factory=list)
    new: set[str] = field(default_factory=set)  # ids in `embed` that Chroma does not hold yet
    relabel: list[Document] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    gone_rows: list[int] = field(default_factory=list)
    done_rows: dict[int, RowSynced] = field(default_factory=dict)
    failed_rows: list[RowFailed] = field(default_factory=list)
    # (doc_id, text_hash) of unchanged documents whose record has no text hash (adopted from the
    # store by worker.pipeline.target): equal content hashes prove the text, so the record names it again
    # and the embedding store keeps its vector.
    text_hashes: list[tuple[str, str]] = field(default_factory=list)
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    poisoned: int = 0  # rows failed too often with these values: skipped

    def outcome(self) -> Outcome:
        """What planning counted (before anything is written)."""
        return Outcome(added=self.added, updated=self.updated, deleted=len(self.delete), unchanged=self.unchanged,
                       failed_rows=self.poisoned)


@dataclass(frozen=True, slots=True)
class _Chunk:
    """What the upsert thread did with one chunk: the rows Chroma refused (source id → reason) and
    the time spent writing."""

    rejected: dict[int, str]
    seconds: float


def _records(docs: Sequence[Document]) -> list[DocRecord]:
    """The records of acknowledged documents, for the state."""
    return [DocRecord(d.doc_id, d.source_id, d.text_hash, d.content_hash) for d in docs]


def _in_project(rec: RowRecord, project: str | None) -> bool:
    return project is None or project in (rec.project, rec.merged_into_project)


class Syncer:
    """Runs sync passes of one source into one collection generation."""

    def __init__(self, reader: SourceReader, state: SyncState, into: Destination, embedder: Embedder,
                 options: SyncOptions, store: EmbeddingStore | None = None) -> None:
        self.reader, self.state, self.embedder, self.options = reader, state, embedder, options
        self.sink = into.sink  # a MirroredSink writes the local vector copy too (worker.pipeline.sink)
        self.derivation = into.derivation  # how rows become this collection's documents
        self.collection = into.collection
        self.store = store  # the embedding store (worker.stores.embedstore): asked before anything is embedded
        self._store_model: int | None = None
        self.stop = options.stop
        self.log = logs.get_logger(collection=self.collection)
        # The upsert thread of a pass that writes, its own connection to the records, the chunks in
        # flight (oldest first), and the batches' finishes (or what waits for them: None) in
        # submission order.
        self._pool: ThreadPoolExecutor | None = None
        self._writes: SyncState | None = None
        self._in_flight: deque[Future[_Chunk]] = deque()
        self._finishing: deque[tuple[Future[Outcome] | None, Callable[[], None] | None]] = deque()
        self._finished = Outcome()  # what resolved finishes did (added to the pass's at its end)
        self._chars_per_s: float | None = None  # embedding rate of this pass's chunks that may yield

    def run(
        self, kinds: Sequence[Kind] = KINDS, project: str | None = None, dry_run: bool = False,
        start_after: Mapping[Kind, int] | None = None, resume: Cursor | None = None,
    ) -> SyncResult:
        """Sync every row of ``kinds`` (optionally one project); stops early when ``stop`` is set.

        ``start_after`` limits a pass to rows above an id per kind (the worker's fast path for new
        rows, oldest first); without it every row is compared, newest first (:meth:`_newest_first`),
        which finds edits and deletions anywhere; ``resume`` (a cursor, moved as the pass goes)
        takes up a full pass where it yielded, or starts one the caller follows."""
        t0 = time.perf_counter()
        cursor: Cursor | None = None
        with self._writer():
            if start_after is None:
                # The caller's cursor is moved in place as ranges are through (rows compared and
                # their writes acknowledged): the worker reads it for its progress.
                cursor = resume if resume is not None else dict.fromkeys(kinds, INF_ID)
                total = self._newest_first(cursor, project, dry_run)
            else:
                total = Outcome()
                for kind in kinds:
                    total += self._sync_kind(kind, project, dry_run, start_after.get(kind, 0))
                    if total.interrupted:
                        break
            total += self._drain()
        result = SyncResult.of(self.collection, total, time.perf_counter() - t0, dry_run)
        yielded = bool(cursor) and total.interrupted and not self.stop.is_set()
        if yielded:
            result = dataclasses.replace(result, resume=cursor)
        if not dry_run:  # space Chroma will not give back until a rebuild (worker.stores.compact)
            self.state.add_churn(self.collection, result.updated + result.deleted)
        event = logs.SYNC_YIELDED if yielded else logs.SYNC_INTERRUPTED if result.interrupted else logs.SYNC_DONE
        self.log.info(event, added=result.added, updated=result.updated, deleted=result.deleted,
                      unchanged=result.unchanged, embedded=result.embedded, reused=result.reused,
                      failed_rows=result.failed_rows, rows=result.rows,
                      seconds=round(result.seconds, 3), dry_run=dry_run)
        return result

    def _progress(self, rows: int, embedded: int) -> None:
        if self.options.progress:
            self.options.progress(rows, embedded)

    @contextlib.contextmanager
    def _writer(self) -> Iterator[None]:
        """The scope of the pass's upsert thread and its connection to the records, opened by the
        first write (:meth:`_submit`; a pass with nothing to write, a dry run, opens neither). On
        the way out every write started is waited for, also when the pass raised: what a write did
        is recorded by the write itself, so nothing is lost, and nothing is left running."""
        try:
            yield
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            if self._writes is not None:
                self._writes.close()
            self._pool = self._writes = None
            self._in_flight.clear()
            self._finishing.clear()
            self._finished = Outcome()

    def _submit(self, fn: Callable[..., _T], *args: object) -> Future[_T]:
        """Run ``fn`` on the upsert thread, after what was submitted before it."""
        if self._pool is None:
            self._writes = self.state.sibling()
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memsync-upsert")
        return self._pool.submit(fn, *args)

    def _await_chunks(self, keep: int = 0) -> None:
        """Wait until at most ``keep`` chunks are in flight, oldest first (an error is raised
        here), then take up what resolved."""
        while len(self._in_flight) > keep:
            self._in_flight.popleft().result()
        self._collect(block=False)

    def _then(self, action: Callable[[], None]) -> None:
        """Do ``action`` once every finish submitted so far has resolved (at once when none waits)."""
        if self._finishing:
            self._finishing.append((None, action))
        else:
            action()

    def _collect(self, block: bool) -> None:
        """Take up resolved finishes in order (all of them when ``block``): add what they did, and
        do what waited for them. A finish that failed raises here."""
        while self._finishing:
            finish, action = self._finishing[0]
            if finish is not None and not (block or finish.done()):
                return
            self._finishing.popleft()
            if finish is not None:
                self._finished += finish.result()
            if action is not None:
                action()

    def _drain_writes(self) -> None:
        """Wait for every write submitted so far, and take up what resolved."""
        self._await_chunks()
        self._collect(block=True)

    def _drain(self) -> Outcome:
        """Wait for every write of the pass; what the finishes did."""
        self._drain_writes()
        done, self._finished = self._finished, Outcome()
        return done

    def _newest_first(self, below: Cursor, project: str | None, dry_run: bool) -> Outcome:
        """Every row of ``kinds``, compared in id ranges from the newest rows backward, the kinds
        interleaved by date: each range is the kind's whose next rows are the newest. So a first
        sync makes the newest memory (what the default window searches) searchable first, and
        prompts and summaries do not wait behind every observation. Each range is compared with
        its records as a whole, as in ascending order: the first owns everything above it (rows
        added meanwhile are the tail pass's), the last everything below, so a deleted row is found
        wherever it was, and a pass stopped anywhere is taken up by the next without a gap.

        With ``yield_to`` (the worker), the pass asks between ranges, and between the chunks of a
        range once every kind's top range is through, whether rows were committed meanwhile, and
        when so it returns with ``below`` (updated in place) saying where it goes on. Its chunks
        then hold about ``YIELD_CHUNK_S`` of embedding each, so such a row waits about that long,
        and its ranges about ``YIELD_RANGE_S`` of work (sized per kind from the rate of its last
        range), so their documents are sorted by length together. A range left in the middle is
        compared again when the pass goes on: what its written chunks hold is unchanged by then,
        and it is left only between chunks, so nothing it embedded is left unwritten."""
        out = Outcome()
        full_size = self.options.read_batch_rows
        start = full_size if self.options.yield_to is None else min(full_size, FIRST_RANGE_ROWS)
        sizes = dict.fromkeys(below, start)  # rows per range, per kind (their documents per row differ)
        ahead = dict(below)  # where the ranges are taken; `below` follows once a range's writes resolved
        while ahead:
            if self.stop.is_set():
                return out + STOPPED
            # Each kind's top range first: then every row below the records' watermarks belongs to
            # this pass and every row above them to a tail pass (what the worker yields to).
            top = [k for k, at in ahead.items() if at == INF_ID]
            kind = top[0] if top else max(ahead, key=lambda k: self.reader.newest_at_or_below(k, ahead[k]) or -1)
            hi, n = ahead[kind], sizes[kind]
            t = time.perf_counter()
            hashes = self.reader.row_hashes_below(kind, hi, n, project)
            out += Outcome(read_seconds=time.perf_counter() - t)
            lo = hashes[0][0] - 1 if len(hashes) == n else 0  # a short batch owns everything below it
            settled = self._settled(kind, hashes, lo, hi, project)
            # The top ranges are not left in the middle (see below); the others may be.
            yield_to = None if top else self.options.yield_to
            out += settled if settled is not None else self._sync_range(kind, project, dry_run, lo, hi, yield_to)
            if out.interrupted:
                return out
            if lo == 0:
                del ahead[kind]
            else:
                ahead[kind] = lo
            self._then(functools.partial(self._moved, below, kind, lo))
            if hi == INF_ID:
                # The records' watermarks (what a tail pass starts above, and what yield_to compares
                # with) are the top ranges' rows: marked before anything else is asked.
                self._drain_writes()
            if self.options.yield_to is not None:
                sizes[kind] = self._range_rows(len(hashes), time.perf_counter() - t)
                if ahead and not top[1:] and self.options.yield_to():
                    return out + STOPPED
        return out

    def _moved(self, below: Cursor, kind: Kind, lo: int) -> None:
        """A range of ``kind`` down to ``lo`` is through, its writes acknowledged: move the cursor."""
        if lo == 0:
            del below[kind]
        else:
            below[kind] = lo
        if self.options.moved is not None:
            self.options.moved(below)

    def _range_rows(self, rows: int, seconds: float) -> int:
        """The rows of the next range of a pass that may yield: as many as the last range's rate
        says take ``YIELD_RANGE_S`` (unchanged ranges are quick, so a reconcile keeps its batches)."""
        if rows == 0 or seconds <= 0:
            return self.options.read_batch_rows
        return max(MIN_RANGE_ROWS, min(self.options.read_batch_rows, int(rows / seconds * YIELD_RANGE_S)))

    def _sync_kind(self, kind: Kind, project: str | None, dry_run: bool, after: int) -> Outcome:
        out = Outcome()
        while True:
            if self.stop.is_set():
                return out + STOPPED
            t = time.perf_counter()
            hashes = self.reader.row_hashes(kind, after, self.options.read_batch_rows, project)
            out += Outcome(read_seconds=time.perf_counter() - t)
            # The last (short) batch owns everything above it: rows deleted at the tail.
            hi = hashes[-1][0] if len(hashes) == self.options.read_batch_rows else INF_ID
            settled = self._settled(kind, hashes, after, hi, project)
            out += settled if settled is not None else self._sync_range(kind, project, dry_run, after, hi)
            if out.interrupted or hi == INF_ID:
                return out
            after = hi

    def _settled(
        self, kind: Kind, hashes: list[tuple[int, str]], lo: int, hi: int, project: str | None
    ) -> Outcome | None:
        """What the rows of (lo, hi] count when they need nothing (None when they do): each has a
        record with its hash that asks for no work (synced, or failed too often), no other record
        is in the range, and the range holds exactly the documents of its synced rows (no stray
        intent, nothing left of a deleted row). Every batch of an unchanged database ends here, on
        two queries of the records and one comparison of lists, the rows' values never read into
        Python (so that an unchanged pass costs little)."""
        settled = self.state.settled_rows(self.collection, kind, lo, hi, project, self.options.max_row_attempts)
        if settled != hashes:
            return None
        totals = self.state.range_totals(self.collection, kind, lo, hi, project)
        if totals.rows != len(hashes) or totals.doc_records != totals.synced_docs:
            return None
        self._progress(len(hashes), 0)
        return Outcome(unchanged=totals.docs, failed_rows=totals.failed, rows=len(hashes))

    def _sync_range(self, kind: Kind, project: str | None, dry_run: bool, after: int, up_to: int,
                    yield_to: YieldFn | None = None) -> Outcome:
        """Read the rows of (after, up_to] in full, compare them row by row and document by document
        with the records, and sync what differs; with ``yield_to``, the range is left between its
        chunks when it says rows wait (``interrupted``, its rows not marked)."""
        out = Outcome()
        while True:
            if self.stop.is_set():
                return out + STOPPED
            t = time.perf_counter()
            rows = self.reader.read_batch(kind, after, self.options.read_batch_rows, project, up_to)
            out += Outcome(read_seconds=time.perf_counter() - t)
            hi = rows[-1].id if len(rows) == self.options.read_batch_rows else up_to
            plan = self._plan(kind, rows, after, hi, project)
            out += plan.outcome()
            if not dry_run:
                out += self._execute(kind, plan, yield_to)
                if out.interrupted:
                    return out
            out += Outcome(rows=len(rows))
            self._progress(len(rows), len(plan.embed))
            if rows or plan.delete:  # a tail pass over a kind with nothing new is not a batch
                self.log.info(logs.SYNC_BATCH, kind=kind.value, rows=len(rows), first_id=after + 1,
                              embed=len(plan.embed), relabel=len(plan.relabel), delete=len(plan.delete),
                              failed=len(plan.failed_rows), dry_run=dry_run)
            if hi == up_to:
                return out
            after = hi

    def _plan(self, kind: Kind, rows: list[SourceRow], lo: int, hi: int, project: str | None) -> _Plan:
        known_rows = {k: v for k, v in self.state.rows_in_range(self.collection, kind, lo, hi).items()
                      if _in_project(v, project)}
        batch_ids = {r.id for r in rows}
        plan = _Plan()
        changed: list[tuple[SourceRow, str]] = []
        settled: set[int] = set()
        settled_docs = 0
        for row in rows:
            rh = row_values_hash(row)
            known = known_rows.get(row.id)
            if known is not None and known.row_hash == rh:
                if known.status == SYNCED:
                    # A row is marked synced only after all its documents were acknowledged.
                    plan.unchanged += known.docs
                    settled.add(row.id)
                    settled_docs += known.docs
                    continue
                if known.status == FAILED and known.attempts >= self.options.max_row_attempts:
                    # Poison row: tried enough with these values. Retried when the row changes.
                    plan.poisoned += 1
                    settled.add(row.id)
                    continue
            changed.append((row, rh))
        plan.gone_rows = sorted(known_rows.keys() - batch_ids)
        # Fast path of an unchanged database: the records in range are exactly the settled rows'
        # documents, so there is nothing to compare, delete or clean up (no stray intents).
        if not changed and not plan.gone_rows and \
                self.state.count_docs_in_range(self.collection, kind, lo, hi) == settled_docs:
            return plan
        by_source: dict[int, list[DocRecord]] = defaultdict(list)
        for rec in self.state.docs_in_range(self.collection, kind, lo, hi).values():
            if rec.source_id in settled:
                continue
            # With a project filter, records of rows outside it are not ours to judge.
            if rec.source_id in batch_ids or rec.source_id in known_rows or project is None:
                by_source[rec.source_id].append(rec)
        for row, rh in changed:
            self._plan_row(row, rh, by_source.pop(row.id, []), plan)
        for recs in by_source.values():  # rows no longer in the source, and stray intents
            plan.delete.extend(r.doc_id for r in recs)
        return plan

    def _plan_row(self, row: SourceRow, rh: str, own: list[DocRecord], plan: _Plan) -> None:
        try:
            docs = self.derivation.build(row)
        except RowError as exc:
            plan.failed_rows.append(RowFailed(row.id, rh, row.project, row.merged_into_project, str(exc)))
            plan.delete.extend(d.doc_id for d in own)  # what they say no longer holds for this row
            return
        records = {d.doc_id: d for d in own}
        for doc in docs:
            rec = records.pop(doc.doc_id, None)
            if rec is not None and rec.content_hash == doc.content_hash:
                plan.unchanged += 1
                if rec.text_hash is None:
                    plan.text_hashes.append((doc.doc_id, doc.text_hash))
            elif rec is not None and rec.content_hash and rec.text_hash == doc.text_hash:
                plan.relabel.append(doc)
                plan.updated += 1
            else:
                plan.embed.append(doc)
                if rec is not None and rec.content_hash:
                    plan.updated += 1
                else:
                    plan.added += 1
                    plan.new.add(doc.doc_id)
        plan.delete.extend(records)  # fields that vanished: a shrunk facts list, a cleared narrative
        plan.done_rows[row.id] = RowSynced(row.id, rh, row.project, row.merged_into_project, len(docs))

    def _execute(self, kind: Kind, plan: _Plan, yield_to: YieldFn | None = None) -> Outcome:
        """Apply a plan: what needs no vector at once, its chunks and then its finish on the upsert
        thread. What it did so far beyond the plan's own counts, ``interrupted`` when stopped (or
        yielding to new rows, ``yield_to``) in between (everything recorded so far is exact: the
        batch's rows are then not marked)."""
        out = self._write_unembedded(kind, plan)
        written, chunks = self._write_embedded(kind, plan, yield_to)
        out += written
        if out.interrupted:
            return out
        if chunks or plan.done_rows or plan.failed_rows:  # a batch with nothing to mark opens no thread
            self._finishing.append((self._submit(self._finish, kind, plan, chunks), None))
        return out

    def _finish(self, kind: Kind, plan: _Plan, chunks: list[Future[_Chunk]]) -> Outcome:
        """On the upsert thread, after the batch's chunks (so they resolved): mark its rows synced,
        or failed with their reason when Chroma refused one of their documents. A chunk that
        failed raises here, and none of the batch's rows is marked (the next pass takes them up)."""
        assert self._writes is not None
        done_rows, failed_rows = dict(plan.done_rows), list(plan.failed_rows)
        rejected: dict[int, str] = {}
        results = [c.result() for c in chunks]
        for c in results:  # a row's first refusal names it
            for sid, reason in c.rejected.items():
                rejected.setdefault(sid, reason)
        for sid, reason in rejected.items():
            done = done_rows.pop(sid, None)
            if done is not None:
                failed_rows.append(RowFailed(sid, done.row_hash, done.project, done.merged_into_project, reason))
        if done_rows:
            self._writes.mark_rows(self.collection, kind, list(done_rows.values()))
        if failed_rows:
            self._writes.mark_failed(self.collection, kind, failed_rows)
            for failed in failed_rows:
                self.log.warning(logs.ROW_FAILED, kind=kind.value, id=failed.source_id, reason=failed.reason[:200])
        return Outcome(failed_rows=len(failed_rows), upsert_seconds=sum(c.seconds for c in results),
                       failures=tuple((kind.value, f.source_id, f.reason) for f in failed_rows))

    def _write_unembedded(self, kind: Kind, plan: _Plan) -> Outcome:
        """What needs no vector: deletes, rows gone, texts named, metadata updates."""
        assert self.sink is not None
        if plan.delete or plan.relabel:
            self._await_chunks()  # the sink (and the vector copy behind it) is written by one thread at a time
        upsert_s = 0.0
        if plan.delete:
            t = time.perf_counter()
            self.sink.delete(plan.delete)
            upsert_s += time.perf_counter() - t
            self.state.forget_docs(self.collection, plan.delete)
        if plan.gone_rows:
            self.state.forget_rows(self.collection, kind, plan.gone_rows)
        if plan.text_hashes:
            self.state.name_texts(self.collection, plan.text_hashes)
        if plan.relabel:
            t = time.perf_counter()
            ids, metas = [d.doc_id for d in plan.relabel], [self.derivation.metadata(d) for d in plan.relabel]
            self.sink.update_metadata(ids, metas)
            upsert_s += time.perf_counter() - t
            self.state.record_synced(self.collection, kind, _records(plan.relabel), self.embedder.model_id)
        return Outcome(upsert_seconds=upsert_s)

    def _write_embedded(self, kind: Kind, plan: _Plan, yield_to: YieldFn | None = None
                        ) -> tuple[Outcome, list[Future[_Chunk]]]:
        """Embed (or look up) the documents to embed, chunk by chunk, each chunk's upsert submitted
        to the upsert thread once fewer than ``CHUNKS_IN_FLIGHT`` (of this batch or an earlier one)
        are unresolved; what embedding did, and the chunks' futures. With ``yield_to``: chunks of about
        ``YIELD_CHUNK_S`` of embedding, and ``yield_to`` asked after each (the first is always
        written, so a pass that yields at every chunk still goes on)."""
        if plan.embed and self.store is not None and self._store_model is None:
            self._store_model = store_model(self.store, self.embedder)
        vectors_of = BatchVectors(self.embedder, self.store, self._store_model, self.options.busy)
        plan.embed = vectors_of.order(plan.embed)
        chunks: list[Future[_Chunk]] = []
        unwritten = Outcome()
        start = 0
        while start < len(plan.embed):
            if self.stop.is_set() or (start > 0 and yield_to is not None and yield_to()):
                # Report what was done, not what was planned: un-count the chunks left out.
                left = plan.embed[start:]
                new = sum(1 for d in left if d.doc_id in plan.new)
                unwritten = Outcome(added=-new, updated=-(len(left) - new), interrupted=True)
                self._await_chunks()
                break
            end = (start + self.options.batch_size) if yield_to is None else \
                self._chunk_end(plan.embed, start, vectors_of)
            chunk = plan.embed[start:end]
            embed_s = vectors_of.embed_s
            vectors = vectors_of.vectors(chunk)
            if yield_to is not None:
                self._paced(chunk, vectors_of, vectors_of.embed_s - embed_s)
            self._await_chunks(keep=CHUNKS_IN_FLIGHT - 1)
            chunks.append(self._submit(self._write_chunk, kind, chunk, vectors))
            self._in_flight.append(chunks[-1])
            start = end
        return unwritten + Outcome(embedded=vectors_of.embedded, reused=vectors_of.reused,
                                   embed_seconds=vectors_of.embed_s, store_seconds=vectors_of.store_s), chunks

    def _chunk_end(self, docs: Sequence[Document], start: int, vectors_of: BatchVectors) -> int:
        """Where the chunk from ``start`` ends when it should hold about ``YIELD_CHUNK_S`` of
        embedding: the model's cost follows the characters it reads, and a text the embedding store
        holds costs none."""
        limit = min(len(docs), start + self.options.batch_size)
        if self._chars_per_s is None:
            return min(limit, start + FIRST_CHUNK_DOCS)
        budget, end = self._chars_per_s * YIELD_CHUNK_S, start
        while end < limit and (end - start < MIN_CHUNK_DOCS or budget > 0):
            budget -= vectors_of.cost(docs[end])
            end += 1
        return end

    def _paced(self, chunk: Sequence[Document], vectors_of: BatchVectors, seconds: float) -> None:
        """Learn the embedding rate (characters a second) from a chunk that embedded enough to time."""
        chars = sum(vectors_of.cost(d) for d in chunk)
        if seconds > 0.05 and chars > 0:
            rate = chars / seconds
            self._chars_per_s = rate if self._chars_per_s is None else 0.5 * (self._chars_per_s + rate)

    def _write_chunk(self, kind: Kind, docs: list[Document], vectors: npt.NDArray[np.float32]) -> _Chunk:
        """Intent records, upsert, then records of what Chroma acknowledged (on the upsert thread,
        with its own connection to the records)."""
        assert self.sink is not None and self._writes is not None
        model = self.embedder.model_id
        self._writes.record_intents(self.collection, kind, [(d.doc_id, d.source_id) for d in docs], model)
        t = time.perf_counter()
        metas = [self.derivation.metadata(d) for d in docs]
        texts = [d.text if d.stored is None else d.stored for d in docs] if self.derivation.stores_text else None
        rejected: dict[int, str] = {}
        try:
            self.sink.upsert([d.doc_id for d in docs], vectors, metas, texts)
            ok = docs
        except RejectedBatch:
            # Find the documents Chroma refuses, one by one; the rest of the batch still syncs.
            ok = []
            for i, d in enumerate(docs):
                try:
                    self.sink.upsert([d.doc_id], vectors[i : i + 1], [metas[i]],
                                     None if texts is None else [texts[i]])
                    ok.append(d)
                except RejectedBatch as exc:
                    rejected.setdefault(d.source_id, str(exc))
        seconds = time.perf_counter() - t
        self._writes.record_synced(self.collection, kind, _records(ok), model)
        return _Chunk(rejected, seconds)
