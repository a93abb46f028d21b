"""One sync pass: source rows → documents → compare with sync records → embed → upsert/delete.

Exact and idempotent (design decisions 2 and 3): every row's documents are compared by content
hash with the records; unchanged ones are neither embedded nor written; documents whose text is
unchanged but whose metadata changed (a project merge) get a metadata update without embedding;
documents that vanished (a deleted row, a shrunk facts list) are deleted once. Rows are taken in id
ranges, and records are compared per range, so rows deleted anywhere, including past the last
row, are found. A range is first compared by its rows' hashes, computed in SQL, with its records:
when they agree it is done without reading a row into Python (a reconcile of an unchanged
database); otherwise its rows are read and compared one by one. Records are written only after
Chroma acknowledged, so a crash at any point replays at most the batch in flight and never leaves
an orphan unaccounted for. Documents to embed are first looked up in the embedding store
(``worker.embedstore``): a text already embedded by the same model, in this pass or any earlier
one, is not embedded again.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.embedding import Embedder
from memsync.worker import logs
from memsync.worker.documents import OWN, Derivation, Document, RowError, SourceRow, row_values_hash
from memsync.worker.embedstore import BatchVectors, EmbeddingStore, store_model
from memsync.worker.sink import RejectedBatch, VectorSink
from memsync.worker.source import SourceReader
from memsync.worker.state import FAILED, SYNCED, DocRecord, RowRecord, SyncState
from memsync.worker.vectorcopy import VectorCopyWriter

INF_ID = 2**62

ProgressFn = Callable[[int, int], None]  # (rows processed, documents embedded) since last call


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What one pass did, in documents (rows where named)."""

    collection: str
    added: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    embedded: int = 0  # texts embedded
    reused: int = 0  # documents written with a stored vector or one of an identical text: no embedding
    rows: int = 0
    failed_rows: int = 0
    seconds: float = 0.0
    embed_seconds: float = 0.0
    upsert_seconds: float = 0.0
    read_seconds: float = 0.0
    store_seconds: float = 0.0  # lookups and writes of the embedding store
    interrupted: bool = False
    dry_run: bool = False
    failures: tuple[tuple[str, int, str], ...] = ()
    upstream: SyncResult | None = None  # the same pass into the upstream-readable store, when on

    @property
    def written(self) -> int:
        """Documents written to Chroma (upserted, updated or deleted)."""
        return self.added + self.updated + self.deleted

    def line(self) -> str:
        """The human summary, e.g. ``0 added, 0 updated, 0 deleted, 120 unchanged``."""
        text = f"{self.added} added, {self.updated} updated, {self.deleted} deleted, {self.unchanged} unchanged"
        if self.failed_rows:
            text += f", {self.failed_rows} failed rows"
        return text


@dataclass
class _Tally:
    added: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    embedded: int = 0
    reused: int = 0
    rows: int = 0
    failed_rows: int = 0
    embed_s: float = 0.0
    upsert_s: float = 0.0
    read_s: float = 0.0
    store_s: float = 0.0
    failures: list[tuple[str, int, str]] = field(default_factory=list)


@dataclass
class _Plan:
    """What a batch needs: documents to embed, to re-label, to delete; rows to mark."""

    embed: list[Document] = field(default_factory=list)
    new: set[str] = field(default_factory=set)  # ids in `embed` that Chroma does not hold yet
    relabel: list[Document] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    gone_rows: list[int] = field(default_factory=list)
    done_rows: dict[int, tuple[str, str, str, int]] = field(default_factory=dict)
    failed_rows: list[tuple[int, str | None, str, str, str]] = field(default_factory=list)
    # (doc_id, text_hash) of unchanged documents whose record has no text hash (adopted from the
    # store by worker.target): equal content hashes prove the text, so the record names it again
    # and the embedding store keeps its vector.
    text_hashes: list[tuple[str, str]] = field(default_factory=list)


def _records(docs: Sequence[Document]) -> list[tuple[str, int, str, str]]:
    """(doc_id, source_id, text_hash, content_hash) of acknowledged documents, for the state."""
    return [(d.doc_id, d.source_id, d.text_hash, d.content_hash) for d in docs]


def _in_project(rec: RowRecord, project: str | None) -> bool:
    return project is None or project in (rec.project, rec.merged_into_project)


class Syncer:
    """Runs sync passes of one source into one collection generation."""

    def __init__(
        self,
        reader: SourceReader,
        sink: VectorSink | None,
        state: SyncState,
        embedder: Embedder,
        *,
        collection: str,
        read_batch_rows: int = 500,
        batch_size: int = 256,
        stop: threading.Event | None = None,
        progress: ProgressFn | None = None,
        max_row_attempts: int = 3,
        copy: VectorCopyWriter | None = None,
        store: EmbeddingStore | None = None,
        derivation: Derivation = OWN,
    ) -> None:
        self.reader, self.sink, self.state, self.embedder = reader, sink, state, embedder
        self.copy = copy  # the local vector copy (worker.vectorcopy), written after each Chroma write
        self.store = store  # the embedding store (worker.embedstore): asked before anything is embedded
        self._store_model: int | None = None
        self.derivation = derivation  # how rows become this collection's documents
        self.collection = collection
        self.read_batch_rows, self.batch_size = read_batch_rows, batch_size
        self.stop = stop or threading.Event()
        self.progress = progress
        self.max_row_attempts = max_row_attempts
        self.log = logs.get_logger(collection=collection)

    def run(
        self, kinds: Sequence[Kind] = KINDS, project: str | None = None, dry_run: bool = False,
        start_after: Mapping[Kind, int] | None = None,
    ) -> SyncResult:
        """Sync every row of ``kinds`` (optionally one project); stops early when ``stop`` is set.

        ``start_after`` limits a pass to rows above an id per kind (the worker's fast path for new
        rows); without it every row is compared, which finds edits and deletions anywhere."""
        t0 = time.perf_counter()
        tally = _Tally()
        interrupted = False
        for kind in kinds:
            if not self._sync_kind(kind, project, dry_run, tally, (start_after or {}).get(kind, 0)):
                interrupted = True
                break
        result = SyncResult(
            collection=self.collection, added=tally.added, updated=tally.updated, deleted=tally.deleted,
            unchanged=tally.unchanged, embedded=tally.embedded, reused=tally.reused, rows=tally.rows,
            failed_rows=tally.failed_rows, seconds=time.perf_counter() - t0, embed_seconds=tally.embed_s,
            upsert_seconds=tally.upsert_s, read_seconds=tally.read_s, store_seconds=tally.store_s,
            interrupted=interrupted, dry_run=dry_run, failures=tuple(tally.failures),
        )
        if not dry_run:  # space Chroma will not give back until a rebuild (worker.compact)
            self.state.add_churn(self.collection, result.updated + result.deleted)
        event = logs.SYNC_INTERRUPTED if interrupted else logs.SYNC_DONE
        self.log.info(event, added=result.added, updated=result.updated, deleted=result.deleted,
                      unchanged=result.unchanged, embedded=result.embedded, reused=result.reused,
                      failed_rows=result.failed_rows, rows=result.rows,
                      seconds=round(result.seconds, 3), dry_run=dry_run)
        return result

    def _sync_kind(self, kind: Kind, project: str | None, dry_run: bool, tally: _Tally, after: int) -> bool:
        while True:
            if self.stop.is_set():
                return False
            t = time.perf_counter()
            hashes = self.reader.row_hashes(kind, after, self.read_batch_rows, project)
            tally.read_s += time.perf_counter() - t
            # The last (short) batch owns everything above it: rows deleted at the tail.
            hi = hashes[-1][0] if len(hashes) == self.read_batch_rows else INF_ID
            if not self._settled(kind, hashes, after, hi, project, tally) and \
                    not self._sync_range(kind, project, dry_run, tally, after, hi):
                return False
            if hi == INF_ID:
                return True
            after = hi

    def _settled(
        self, kind: Kind, hashes: list[tuple[int, str]], lo: int, hi: int, project: str | None, tally: _Tally
    ) -> bool:
        """True, and counted, when the rows of (lo, hi] need nothing: each has a record with its hash
        that asks for no work (synced, or failed too often), no other record is in the range, and the
        range holds exactly the documents of its synced rows (no stray intent, nothing left of a
        deleted row). Every batch of an unchanged database ends here, on two queries of the records
        and one comparison of lists, the rows' values never read into Python (issue 16)."""
        if self.state.settled_rows(self.collection, kind, lo, hi, project, self.max_row_attempts) != hashes:
            return False
        totals = self.state.range_totals(self.collection, kind, lo, hi, project)
        if totals.rows != len(hashes) or totals.doc_records != totals.synced_docs:
            return False
        tally.unchanged += totals.docs
        tally.failed_rows += totals.failed
        tally.rows += len(hashes)
        if self.progress:
            self.progress(len(hashes), 0)
        return True

    def _sync_range(
        self, kind: Kind, project: str | None, dry_run: bool, tally: _Tally, after: int, up_to: int
    ) -> bool:
        """Read the rows of (after, up_to] in full, compare them row by row and document by document
        with the records, and sync what differs; False when stopped."""
        while True:
            if self.stop.is_set():
                return False
            t = time.perf_counter()
            rows = self.reader.read_batch(kind, after, self.read_batch_rows, project, up_to)
            tally.read_s += time.perf_counter() - t
            hi = rows[-1].id if len(rows) == self.read_batch_rows else up_to
            plan = self._plan(kind, rows, after, hi, project, tally)
            if not dry_run and not self._execute(kind, plan, tally):
                return False
            tally.rows += len(rows)
            if self.progress:
                self.progress(len(rows), len(plan.embed))
            if rows or plan.delete:  # a tail pass over a kind with nothing new is not a batch
                self.log.info(logs.SYNC_BATCH, kind=kind.value, rows=len(rows), first_id=after + 1,
                              embed=len(plan.embed), relabel=len(plan.relabel), delete=len(plan.delete),
                              failed=len(plan.failed_rows), dry_run=dry_run)
            if hi == up_to:
                return True
            after = hi

    def _plan(
        self, kind: Kind, rows: list[SourceRow], lo: int, hi: int, project: str | None, tally: _Tally
    ) -> _Plan:
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
                    tally.unchanged += known.docs
                    settled.add(row.id)
                    settled_docs += known.docs
                    continue
                if known.status == FAILED and known.attempts >= self.max_row_attempts:
                    # Poison row: tried enough with these values. Retried when the row changes.
                    tally.failed_rows += 1
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
            self._plan_row(row, rh, by_source.pop(row.id, []), plan, tally)
        for recs in by_source.values():  # rows no longer in the source, and stray intents
            plan.delete.extend(r.doc_id for r in recs)
        tally.deleted += len(plan.delete)
        return plan

    def _plan_row(self, row: SourceRow, rh: str, own: list[DocRecord], plan: _Plan, tally: _Tally) -> None:
        try:
            docs = self.derivation.build(row)
        except RowError as exc:
            plan.failed_rows.append((row.id, rh, row.project, row.merged_into_project, str(exc)))
            plan.delete.extend(d.doc_id for d in own)  # what they say no longer holds for this row
            return
        records = {d.doc_id: d for d in own}
        for doc in docs:
            rec = records.pop(doc.doc_id, None)
            if rec is not None and rec.content_hash == doc.content_hash:
                tally.unchanged += 1
                if rec.text_hash is None:
                    plan.text_hashes.append((doc.doc_id, doc.text_hash))
            elif rec is not None and rec.content_hash and rec.text_hash == doc.text_hash:
                plan.relabel.append(doc)
                tally.updated += 1
            else:
                plan.embed.append(doc)
                if rec is not None and rec.content_hash:
                    tally.updated += 1
                else:
                    tally.added += 1
                    plan.new.add(doc.doc_id)
        plan.delete.extend(records)  # fields that vanished: a shrunk facts list, a cleared narrative
        plan.done_rows[row.id] = (rh, row.project, row.merged_into_project, len(docs))

    def _to_copy(self, op: str, *args: Any) -> None:
        """Apply a Chroma write to the local vector copy too; a copy that cannot be written is
        marked incomplete and left alone for the rest of the pass (searches then use Chroma)."""
        if self.copy is None:
            return
        try:
            getattr(self.copy, op)(*args)
        except (OSError, ValueError) as exc:
            self.log.warning(logs.VECTOR_COPY_FAILED, op=op, error=str(exc)[:200])
            self.copy.invalidate()
            self.copy = None

    def _execute(self, kind: Kind, plan: _Plan, tally: _Tally) -> bool:
        """Apply a plan; False when stopped in between (everything recorded so far is exact)."""
        assert self.sink is not None
        model = self.embedder.model_id
        if plan.delete:
            t = time.perf_counter()
            self.sink.delete(plan.delete)
            self._to_copy("delete", plan.delete)
            tally.upsert_s += time.perf_counter() - t
            self.state.forget_docs(self.collection, plan.delete)
        if plan.gone_rows:
            self.state.forget_rows(self.collection, kind, plan.gone_rows)
        if plan.text_hashes:
            self.state.name_texts(self.collection, plan.text_hashes)
        if plan.relabel:
            t = time.perf_counter()
            ids, metas = [d.doc_id for d in plan.relabel], [self.derivation.metadata(d) for d in plan.relabel]
            self.sink.update_metadata(ids, metas)
            self._to_copy("relabel", ids, metas)
            tally.upsert_s += time.perf_counter() - t
            self.state.record_synced(self.collection, kind, _records(plan.relabel), model)
        rejected: dict[int, str] = {}
        if plan.embed and self.store is not None and self._store_model is None:
            self._store_model = store_model(self.store, self.embedder)
        vectors_of = BatchVectors(self.embedder, self.store, self._store_model)
        plan.embed = vectors_of.order(plan.embed)
        # Embedding (CPU, this thread) overlaps the previous chunk's intents + upsert + records
        # (I/O, one helper thread, so state writes never interleave). At most one chunk in flight.
        in_flight: Future[None] | None = None
        stopped = False
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="memsync-upsert") as pool:
            for start in range(0, len(plan.embed), self.batch_size):
                if self.stop.is_set():
                    # Report what was done, not what was planned: un-count the chunks left out.
                    left = plan.embed[start:]
                    new = sum(1 for d in left if d.doc_id in plan.new)
                    tally.added -= new
                    tally.updated -= len(left) - new
                    stopped = True
                    break
                chunk = plan.embed[start : start + self.batch_size]
                vectors = vectors_of.vectors(chunk)
                if in_flight is not None:
                    in_flight.result()  # re-raises the helper's error here
                in_flight = pool.submit(self._write_chunk, kind, chunk, vectors, tally, rejected)
            if in_flight is not None:
                in_flight.result()
        tally.embedded += vectors_of.embedded
        tally.reused += vectors_of.reused
        tally.embed_s += vectors_of.embed_s
        tally.store_s += vectors_of.store_s
        if stopped:
            return False
        for sid, reason in rejected.items():
            row_info = plan.done_rows.pop(sid, None)
            if row_info is not None:
                plan.failed_rows.append((sid, row_info[0], row_info[1], row_info[2], reason))
        if plan.done_rows:
            self.state.mark_rows(
                self.collection, kind, [(sid, *info) for sid, info in plan.done_rows.items()]
            )
        if plan.failed_rows:
            self.state.mark_failed(self.collection, kind, plan.failed_rows)
            for sid, _, _, _, reason in plan.failed_rows:
                tally.failures.append((kind.value, sid, reason))
                self.log.warning(logs.ROW_FAILED, kind=kind.value, id=sid, reason=reason[:200])
            tally.failed_rows += len(plan.failed_rows)
        return True

    def _write_chunk(
        self, kind: Kind, docs: list[Document], vectors: npt.NDArray[np.float32], tally: _Tally,
        rejected: dict[int, str],
    ) -> None:
        """Intent records, upsert, then records of what Chroma acknowledged."""
        assert self.sink is not None
        model = self.embedder.model_id
        self.state.record_intents(self.collection, kind, [(d.doc_id, d.source_id) for d in docs], model)
        t = time.perf_counter()
        metas = [self.derivation.metadata(d) for d in docs]
        texts = [d.text if d.stored is None else d.stored for d in docs] if self.derivation.stores_text else None
        try:
            self.sink.upsert([d.doc_id for d in docs], vectors, metas, texts)
            ok = list(range(len(docs)))
        except RejectedBatch:
            # Find the documents Chroma refuses, one by one; the rest of the batch still syncs.
            ok = []
            for i, d in enumerate(docs):
                try:
                    self.sink.upsert([d.doc_id], vectors[i : i + 1], [metas[i]],
                                     None if texts is None else [texts[i]])
                    ok.append(i)
                except RejectedBatch as exc:
                    rejected.setdefault(d.source_id, str(exc))
        self._to_copy("put", [docs[i].doc_id for i in ok], vectors[ok], [metas[i] for i in ok])
        tally.upsert_s += time.perf_counter() - t
        self.state.record_synced(self.collection, kind, _records([docs[i] for i in ok]), model)
