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

A batch is a pipeline of named stages, called in order by :meth:`Syncer._sync_range`: read
(``_read``) → derive and compare (``_plan``) → embed (``_write_embedded``, a chunk at a time) →
write (``_Writes.chunk``: intents, ``sink.upsert``, records) → finish (``_Writes.finish``: the
batch's rows marked once every chunk is acknowledged). Embedding (CPU, the sync thread) overlaps
writing (I/O): the write and finish stages run in order on the pass's writer thread, with its own
connection to the records (``worker.pipeline.overlap.OrderedWriter``, the one place of the pass that starts
a thread), while the sync thread reads, plans and embeds the next chunk; at most
``CHUNKS_IN_FLIGHT`` chunks are in flight. What follows a batch's finish (a full pass's cursor
moving) happens only once it resolved, and a pass returns only when every write it started has.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.formats.first_sync import INF_ID, Cursor
from memsync.config.settings import Settings
from memsync.embedding import Embedder
from memsync.worker.pipeline.overlap import OrderedWriter, Pacer
from memsync.worker.pipeline.sink import RejectedBatch, VectorSink
from memsync.worker.process import logs
from memsync.worker.rows.documents import OWN, Derivation, Document, RowError, SourceRow, row_values_hash
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.state import FAILED, SYNCED, DocRecord, RowFailed, RowRecord, RowSynced, SyncState
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
    """What the writer thread did with one chunk: the rows Chroma refused (source id → reason) and
    the time spent writing."""

    rejected: dict[int, str]
    seconds: float


@dataclass(frozen=True, slots=True)
class _Batch:
    """One batch's writes: its kind, and what the writer thread did with each of its chunks so far
    (appended there only, read by the batch's finish after them)."""

    kind: Kind
    chunks: list[_Chunk] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _ChunkWrite:
    """The write stage's input: a chunk of a batch's documents with their vectors."""

    batch: _Batch
    docs: list[Document]
    vectors: npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class _BatchEnd:
    """The finish stage's input: a batch whose chunks were all handed in, and its plan."""

    batch: _Batch
    plan: _Plan


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
        # The write and finish stages (run on the writer thread, with their own connection to the
        # records), and the writer: chunks and finishes in order, at most CHUNKS_IN_FLIGHT chunks.
        self._writes = _Writes(self.state, into, embedder.model_id, self.log)
        self._writer: OrderedWriter[_ChunkWrite | _BatchEnd, Outcome] = OrderedWriter(
            self._writes.write, bound=CHUNKS_IN_FLIGHT, name="memsync-upsert")
        # The size of the chunks of a pass that may yield, from this syncer's embedding rate.
        self._pacer = Pacer(target_s=YIELD_CHUNK_S, first=FIRST_CHUNK_DOCS, least=MIN_CHUNK_DOCS)

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
        with self._writes, self._writer:  # a pass with nothing to write opens neither
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

    def _drain(self) -> Outcome:
        """Wait for every write handed in so far; what they did since the last drain."""
        return sum(self._writer.drain(), Outcome())

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
            kind = top[0] if top else self._newest_kind(ahead)
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
            _lower(ahead, kind, lo)
            self._writer.after(functools.partial(self._moved, below, kind, lo))
            if hi == INF_ID:
                # The records' watermarks (what a tail pass starts above, and what yield_to compares
                # with) are the top ranges' rows: marked before anything else is asked.
                out += self._drain()
            if self.options.yield_to is not None:
                sizes[kind] = self._range_rows(len(hashes), time.perf_counter() - t)
                if ahead and not top[1:] and self.options.yield_to():
                    return out + STOPPED
        return out

    def _moved(self, below: Cursor, kind: Kind, lo: int) -> None:
        """A range of ``kind`` down to ``lo`` is through, its writes acknowledged: move the cursor."""
        _lower(below, kind, lo)
        if self.options.moved is not None:
            self.options.moved(below)

    def _newest_kind(self, ahead: Cursor) -> Kind:
        """The kind whose next rows below ``ahead`` are the newest."""
        return max(ahead, key=lambda k: self.reader.newest_at_or_below(k, ahead[k]) or -1)

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
        with the records, and sync what differs, a read batch at a time: read → derive and compare
        (the plan) → embed, write and finish (:meth:`_write`). With ``yield_to``, the range is left
        between its chunks when it says rows wait (``interrupted``, its rows not marked)."""
        out = Outcome()
        while True:
            if self.stop.is_set():
                return out + STOPPED
            rows, read = self._read(kind, project, after, up_to)
            hi = rows[-1].id if len(rows) == self.options.read_batch_rows else up_to
            plan = self._plan(kind, rows, after, hi, project)
            out += read + plan.outcome()
            if not dry_run:
                out += self._write(kind, plan, yield_to)
                if out.interrupted:
                    return out
            out += Outcome(rows=len(rows))
            self._batch_done(kind, rows, after, plan, dry_run)
            if hi == up_to:
                return out
            after = hi

    def _read(self, kind: Kind, project: str | None, after: int, up_to: int) -> tuple[list[SourceRow], Outcome]:
        """The read stage: the next read batch of (after, up_to], fully fetched, and its time."""
        t = time.perf_counter()
        rows = self.reader.read_batch(kind, after, self.options.read_batch_rows, project, up_to)
        return rows, Outcome(read_seconds=time.perf_counter() - t)

    def _batch_done(self, kind: Kind, rows: list[SourceRow], after: int, plan: _Plan, dry_run: bool) -> None:
        """A batch is through (its writes handed in): progress, and its log line."""
        self._progress(len(rows), len(plan.embed))
        if rows or plan.delete:  # a tail pass over a kind with nothing new is not a batch
            self.log.info(logs.SYNC_BATCH, kind=kind.value, rows=len(rows), first_id=after + 1,
                          embed=len(plan.embed), relabel=len(plan.relabel), delete=len(plan.delete),
                          failed=len(plan.failed_rows), dry_run=dry_run)

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

    def _write(self, kind: Kind, plan: _Plan, yield_to: YieldFn | None = None) -> Outcome:
        """Apply a plan: what needs no vector at once, then embed and write its chunks, then its
        finish (both on the writer thread). What it did so far beyond the plan's own counts,
        ``interrupted`` when stopped (or yielding to new rows, ``yield_to``) in between
        (everything recorded so far is exact: the batch's rows are then not marked)."""
        out = self._write_unembedded(kind, plan)
        batch = _Batch(kind)
        written, chunks = self._write_embedded(batch, plan, yield_to)
        out += written
        if out.interrupted:
            return out
        if chunks or plan.done_rows or plan.failed_rows:  # a batch with nothing to mark opens no thread
            # The finish stage, on the writer thread after the batch's chunks: _Writes.finish.
            self._writer.put(_BatchEnd(batch, plan), bounded=False)
        return out

    def _write_unembedded(self, kind: Kind, plan: _Plan) -> Outcome:
        """What needs no vector: deletes, rows gone, texts named, metadata updates."""
        assert self.sink is not None
        if plan.delete or plan.relabel:
            self._writer.settle()  # the sink (and the vector copy behind it) is written by one thread at a time
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

    def _write_embedded(self, batch: _Batch, plan: _Plan, yield_to: YieldFn | None = None) -> tuple[Outcome, int]:
        """The embed stage: embed (or look up) the documents to embed, chunk by chunk, each chunk
        handed to the write stage (``_Writes.chunk``, on the writer thread) once fewer than
        ``CHUNKS_IN_FLIGHT`` (of this batch or an earlier one) are unresolved; what embedding did,
        and the chunks handed in. With ``yield_to``: chunks of about ``YIELD_CHUNK_S`` of embedding
        (the pacer), and ``yield_to`` asked after each (the first is always written, so a pass that
        yields at every chunk still goes on)."""
        if plan.embed and self.store is not None and self._store_model is None:
            self._store_model = store_model(self.store, self.embedder)
        vectors_of = BatchVectors(self.embedder, self.store, self._store_model, self.options.busy)
        plan.embed = vectors_of.order(plan.embed)
        unwritten, start, chunks = Outcome(), 0, 0
        while start < len(plan.embed):
            if self.stop.is_set() or (start > 0 and yield_to is not None and yield_to()):
                unwritten = _left_out(plan, start)
                self._writer.settle()
                break
            limit = min(len(plan.embed), start + self.options.batch_size)
            end = limit if yield_to is None else self._pacer.end(plan.embed, start, limit, vectors_of.cost)
            chunk = plan.embed[start:end]
            embed_s = vectors_of.embed_s
            vectors = vectors_of.vectors(chunk)
            if yield_to is not None:
                self._pacer.learn(sum(vectors_of.cost(d) for d in chunk), vectors_of.embed_s - embed_s)
            self._writer.put(_ChunkWrite(batch, chunk, vectors))  # the write stage: _Writes.chunk
            chunks += 1
            start = end
        return unwritten + Outcome(embedded=vectors_of.embedded, reused=vectors_of.reused,
                                   embed_seconds=vectors_of.embed_s, store_seconds=vectors_of.store_s), chunks


def _lower(cursor: Cursor, kind: Kind, lo: int) -> None:
    """Move ``cursor`` of ``kind`` down to ``lo`` (0: the kind is through, gone from it)."""
    if lo == 0:
        del cursor[kind]
    else:
        cursor[kind] = lo


def _left_out(plan: _Plan, start: int) -> Outcome:
    """A batch left before its chunk from ``start``: report what was done, not what was planned
    (the chunks left out un-counted), and that it was interrupted."""
    left = plan.embed[start:]
    new = sum(1 for d in left if d.doc_id in plan.new)
    return Outcome(added=-new, updated=-(len(left) - new), interrupted=True)


class _Writes:
    """The write and finish stages of a pass's batches, run on its writer thread in the order
    handed in (:meth:`write`), with their own connection to the records (opened by the first
    write; :meth:`close` at the end of the pass)."""

    def __init__(self, state: SyncState, into: Destination, model: str, log: Any) -> None:
        self.state, self.sink, self.derivation, self.collection = state, into.sink, into.derivation, into.collection
        self.model, self.log = model, log
        self._records: SyncState | None = None

    def __enter__(self) -> _Writes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection to the records (once the writer thread is through)."""
        if self._records is not None:
            self._records.close()
        self._records = None

    def write(self, job: _ChunkWrite | _BatchEnd) -> Outcome:
        """Write a chunk (what it did is kept with its batch, for the finish) or finish a batch."""
        if self._records is None:
            self._records = self.state.sibling()
        if isinstance(job, _BatchEnd):
            return self.finish(job, self._records)
        job.batch.chunks.append(self.chunk(job, self._records))
        return Outcome()

    def chunk(self, job: _ChunkWrite, records: SyncState) -> _Chunk:
        """The write stage: intent records, upsert, then records of what Chroma acknowledged."""
        assert self.sink is not None
        docs, vectors, kind = job.docs, job.vectors, job.batch.kind
        records.record_intents(self.collection, kind, [(d.doc_id, d.source_id) for d in docs], self.model)
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
        records.record_synced(self.collection, kind, _records(ok), self.model)
        return _Chunk(rejected, seconds)

    def finish(self, job: _BatchEnd, records: SyncState) -> Outcome:
        """The finish stage, after the batch's chunks (so they were written): mark its rows synced,
        or failed with their reason when Chroma refused one of their documents. When a chunk
        failed, the finish does not run (``worker.pipeline.overlap``): none of the batch's rows is marked,
        and the next pass takes them up."""
        kind, plan = job.batch.kind, job.plan
        done_rows, failed_rows = dict(plan.done_rows), list(plan.failed_rows)
        rejected: dict[int, str] = {}
        for c in job.batch.chunks:  # a row's first refusal names it
            for sid, reason in c.rejected.items():
                rejected.setdefault(sid, reason)
        for sid, reason in rejected.items():
            done = done_rows.pop(sid, None)
            if done is not None:
                failed_rows.append(RowFailed(sid, done.row_hash, done.project, done.merged_into_project, reason))
        if done_rows:
            records.mark_rows(self.collection, kind, list(done_rows.values()))
        if failed_rows:
            records.mark_failed(self.collection, kind, failed_rows)
            for failed in failed_rows:
                self.log.warning(logs.ROW_FAILED, kind=kind.value, id=failed.source_id, reason=failed.reason[:200])
        return Outcome(failed_rows=len(failed_rows), upsert_seconds=sum(c.seconds for c in job.batch.chunks),
                       failures=tuple((kind.value, f.source_id, f.reason) for f in failed_rows))
