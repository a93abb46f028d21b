"""The semantic side of a search: which vector strategy answers, and the rows it finds.

The query is embedded by the worker's model; then, picked by cost without losing a row that passes
the filters and window (design note 6):
- no filter and no window: Chroma's unfiltered top-N (2-5 ms), collapsed onto rows;
- a window, project or type restriction and a complete local vector copy (``search.vectorcopy``):
  the copy scanned exactly over the documents that pass, checked against SQLite;
- otherwise Chroma's unfiltered top-N, then SQLite says which rows pass. When fewer than the page
  needs pass, a deeper top-N (over-fetch); when still too few, the filtered rows are searched
  exactly: by id when the filter matches at most ``filter_ids_cap`` rows, else with a Chroma
  ``where`` on the window/project/kind/type (then the rest is checked in SQLite).
Observations (and summaries) searched as evidence for prompts (linked evidence, ``search.links``) ride along.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from memsync.config.claude_mem.platform import normalize_platform
from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.docids import DOC_TYPES, possible_doc_ids
from memsync.config.formats.sync_records import synced_doc_ids
from memsync.config.settings import Settings
from memsync.search import context as prompt_context
from memsync.search.models import Filters, Key, Window
from memsync.search.sql import SourceRows
from memsync.search.threads import one_blas_thread
from memsync.search.timing import elapsed_ms
from memsync.search.vectorcopy import VectorCopy
from memsync.search.vectorstore import RowHit, VectorStore, VectorUnavailable

# Rows that vouch for the prompt they were recorded under (linked evidence, ``search.links``).
# Summaries too were measured as evidence (attributed to the session's prompt nearest to them):
# recall@10 -0.003 to -0.007 on every linking. A summary covers a whole session, so the prompt
# nearest to it is not the one a query is after; they stay results of their own.
EVIDENCE_KINDS = (Kind.OBSERVATION,)

OVERFETCH = 5  # second, deeper look before searching the filtered rows exactly ...
MAX_OVERFETCH = 5000  # ... at most this many documents deep

Vector = npt.NDArray[np.float32]


@dataclass
class SemanticAnswer:
    """What the semantic side found, best first, and how long each strategy took."""

    hits: list[RowHit] = field(default_factory=list)  # rows of the searched kinds
    similarity: dict[Key, RowHit] = field(default_factory=dict)  # every row found, evidence included
    evidence: list[Key] = field(default_factory=list)  # evidence rows found for linked prompts, best first
    context: list[int] = field(default_factory=list)  # prompts ranked in their neighbours' context
    copy: VectorCopy | None = None  # the vector copy this search read, for the linked evidence
    timings: dict[str, float] = field(default_factory=dict)
    note: str | None = None  # what the response's reason should say (a damaged vector copy)


class SemanticSide:
    """The semantic side of one search over the vector store; see the module docstring."""

    def __init__(self, settings: Settings, store: VectorStore) -> None:
        self.settings = settings
        self.store = store
        self.copy_damaged: str | None = None  # why the vector copy was not used, when it is damaged

    def search(self, query: str, kinds: Sequence[Kind], filters: Filters, window: Window, need: int, depth: int,
               linked: bool, context: bool = False) -> SemanticAnswer:
        """The rows nearest to ``query`` within filters/window (at least ``need`` of the searched
        kinds when that many exist); with ``linked``, also the evidence rows (``EVIDENCE_KINDS``)
        nearest the query, for the prompts they were recorded under; with ``context``, the prompts
        ranked in the context of their neighbours too (``search.context``). Raises
        VectorUnavailable when the store cannot answer."""
        t = time.perf_counter()
        self.store.ensure()  # before opening anything: a down store costs nothing more
        rows = SourceRows.open(self.settings)
        try:
            with one_blas_thread():
                answer = self._search(rows, query, kinds, filters, window, need, depth, linked, context)
        finally:
            rows.close()
        answer.timings["semantic"] = elapsed_ms(t)
        return answer

    def _search(self, rows: SourceRows, query: str, kinds: Sequence[Kind], filters: Filters, window: Window,
                need: int, depth: int, linked: bool, context: bool) -> SemanticAnswer:
        t = time.perf_counter()
        timings: dict[str, float] = {}
        vec = self.store.embed(query)
        timings["embed"] = elapsed_ms(t)
        restricted = bool(filters.project or filters.platform or filters.types or filters.concepts or filters.files
                          or window.start_ms is not None or window.end_ms is not None)
        linked_kinds = tuple(k for k in EVIDENCE_KINDS if k not in kinds) if Kind.PROMPT in kinds and linked else ()
        wanted = set(kinds) | set(linked_kinds)
        # The copy's entries know kind, project, type and time, not concepts, files or platform: a
        # search filtered by those goes to Chroma and the rows that pass (a rare platform would
        # otherwise make the copy score the whole window again and again).
        copy = self.vector_copy() if restricted and not (filters.concepts or filters.files or filters.platform) \
            else None
        if copy is not None:
            # Exact over the documents that pass, from the local copy: no over-fetch, no loss.
            try:
                hits = self._copy_scan(rows, copy, vec, kinds, wanted, filters, window, need, depth, timings)
            except (IndexError, ValueError) as exc:
                # Trigger: the copy was damaged in place after this process checked it. Why: a
                # search never raises for a derived file. Outcome: Chroma answers, the worker's
                # next check of the copy rebuilds it.
                self.copy_damaged, copy = f"{type(exc).__name__}: {exc}"[:120], None
        if copy is not None:
            timings["vector_copy"] = elapsed_ms(t) - timings["embed"]
            restricted = False
        else:
            hits, exhaustive = self.store.nearest_docs(vec, depth)
            timings["vector_query"] = elapsed_ms(t) - timings["embed"]
        if restricted:
            # Filters before the cut: the filtered rows of the unfiltered top-N are the true
            # filtered top rows as far as they go; when too few pass, look deeper (over-fetch),
            # then search exactly the rows that pass (by id, or with a Chroma where).
            passing = passing_hits(rows, hits, wanted, filters, window)
            found = sum(h.kind in kinds for h in passing)
            if not exhaustive and found < need:
                # Deeper, as deep as the pass rate seen so far says is needed (twice, for margin):
                # a top-5,000 query costs ~30 ms at 313k documents, Chroma's `where` 400-1,000 ms.
                rate = max(found, 1) / max(1, sum(h.kind in kinds for h in hits))
                deeper = min(MAX_OVERFETCH, max(depth * OVERFETCH, int(2 * need / rate * depth / max(1, len(hits)))))
                hits, exhaustive = self.store.nearest_docs(vec, deeper)
                passing = passing_hits(rows, hits, wanted, filters, window)
                timings["vector_overfetch"] = elapsed_ms(t) - timings["embed"] - timings["vector_query"]
            if not exhaustive and sum(h.kind in kinds for h in passing) < need:
                passing = self._exact(rows, vec, wanted, filters, window, depth)
                timings["vector_exact"] = elapsed_ms(t) - timings["embed"] - timings["vector_query"]
            hits = passing
        answer = SemanticAnswer([h for h in hits if h.kind in kinds], {(h.kind, h.id): h for h in hits},
                                timings=timings)
        if linked_kinds:
            answer.evidence = [(h.kind, h.id) for h in hits if h.kind in linked_kinds]
        if (context and Kind.PROMPT in kinds) or linked_kinds:
            # Opened once: the context list and linked evidence share it (never a copy found damaged).
            copy = copy or (None if self.copy_damaged else self.vector_copy())
            answer.copy = copy
        if context and Kind.PROMPT in kinds:
            t = time.perf_counter()
            if copy is not None:
                prompts = [h.id for h in answer.hits if h.kind is Kind.PROMPT][:depth]
                answer.context = prompt_context.ranking(rows, copy, vec, prompts, filters, window)
            timings["context"] = elapsed_ms(t)
        if self.copy_damaged:
            answer.note = f"semantic: Chroma (vector copy damaged, the worker rebuilds it: {self.copy_damaged})"
        return answer

    def vector_copy(self) -> VectorCopy | None:
        """The local vector copy of the active generation, when this data directory has a complete
        and undamaged one (a damaged one's reason is kept in ``copy_damaged``)."""
        copy, damaged = VectorCopy.open_checked(self.settings, self.store.collection_name(),
                                                self.store.embedder.model_id, self.store.embedder.dimension)
        self.copy_damaged = self.copy_damaged or damaged
        return copy

    @staticmethod
    def _copy_scan(rows: SourceRows, copy: VectorCopy, vec: Vector, kinds: Sequence[Kind], wanted: set[Kind],
                   filters: Filters, window: Window, need: int, depth: int,
                   timings: dict[str, float]) -> list[RowHit]:
        """The nearest rows within filters/window from the copy, checked against SQLite (the copy's
        metadata can trail an edit by a sync pass); deeper while too few of them pass. Adds its
        stages to ``timings`` (candidates, scoring, SQLite's confirmation)."""
        t = time.perf_counter()
        positions = copy.candidates(wanted, filters, window)
        timings["copy_candidates"] = elapsed_ms(t)
        n_docs = depth * 3
        while True:
            t = time.perf_counter()
            hits, exhaustive = copy.nearest(vec, positions, n_docs)
            timings["copy_score"] = timings.get("copy_score", 0.0) + elapsed_ms(t)
            t = time.perf_counter()
            passing = passing_hits(rows, hits, wanted, filters, window)
            timings["copy_confirm"] = timings.get("copy_confirm", 0.0) + elapsed_ms(t)
            if exhaustive or sum(h.kind in kinds for h in passing) >= need:
                return passing
            n_docs *= 4

    def _exact(self, rows: SourceRows, vec: Vector, kinds: set[Kind], filters: Filters, window: Window,
               depth: int) -> list[RowHit]:
        """Nearest rows among exactly those within filters/window: a query restricted to their
        documents. Which documents exist comes from the sync records when this data directory has
        them (one local read), else from Chroma (one round trip per 8,000 possible ids). More than
        ``filter_ids_cap`` rows of a kind: a Chroma ``where`` instead."""
        passing: dict[Kind, list[int]] = {}
        for kind in kinds:
            ids = rows.filtered_ids(kind, filters, window, self.settings.filter_ids_cap)
            if ids is None:
                return self._where(rows, vec, kinds, filters, window, depth)
            passing[kind] = ids
        synced: list[str] | None = []
        collection = self.store.collection_name()
        for kind, ids in passing.items():
            found = synced_doc_ids(self.settings.state_path, collection, kind, ids)
            synced = None if found is None or synced is None else synced + found
        if synced is not None:
            try:
                return self.store.nearest(vec, depth * 3, ids=synced, verified=True)
            except VectorUnavailable:
                pass  # a record ahead of the store (a delete in flight): ask the store itself
        doc_ids: list[str] = []
        for kind, ids in passing.items():
            facts = rows.fact_counts(ids) if kind is Kind.OBSERVATION else {}
            for i in ids:
                doc_ids.extend(possible_doc_ids(kind, i, facts.get(i, 0)))
        return self.store.nearest(vec, depth * 3, ids=doc_ids)

    def _where(self, rows: SourceRows, vec: Vector, kinds: set[Kind], filters: Filters, window: Window,
               depth: int) -> list[RowHit]:
        """Many rows pass: let Chroma filter on the metadata it has (window, project, kind, type),
        then check the rest (concepts, files) and everything again in SQLite."""
        clauses: list[dict[str, Any]] = []
        if window.start_ms is not None:
            clauses.append({"created_at_epoch": {"$gte": window.start_ms}})
        if window.end_ms is not None:
            clauses.append({"created_at_epoch": {"$lte": window.end_ms}})
        if len(kinds) < len(KINDS):
            clauses.append({"doc_type": {"$in": [DOC_TYPES[k] for k in kinds]}})
        if filters.types:
            clauses.append({"type": {"$in": list(filters.types)}})
        if filters.project:
            clauses.append({"$or": [{"project": filters.project}, {"merged_into_project": filters.project}]})
        if filters.platform:  # stored normalised (documents version 2)
            clauses.append({"platform_source": normalize_platform(filters.platform)})
        where: dict[str, Any] | None = None
        if len(clauses) == 1:
            where = clauses[0]
        elif clauses:
            where = {"$and": clauses}
        hits = self.store.nearest(vec, depth * 3, where=where)
        return passing_hits(rows, hits, kinds, filters, window)


def passing_hits(rows: SourceRows, hits: list[RowHit], kinds: set[Kind], filters: Filters,
                 window: Window) -> list[RowHit]:
    """The hits (of ``kinds``) whose rows exist and pass filters and window, in their order."""
    keep: set[Key] = set()
    for kind in kinds:
        ids = [h.id for h in hits if h.kind is kind]
        keep.update((kind, i) for i in rows.passing(kind, ids, filters, window))
    return [h for h in hits if (h.kind, h.id) in keep]
