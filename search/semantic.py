"""The semantic side of a search: which vector strategy answers, and the rows it finds.

The query is embedded by the worker's model; then, picked by cost without losing a row that passes
the filters and window (the cheapest strategy that is still exact):
- no filter and no window: Chroma's unfiltered top-N (2-5 ms), collapsed onto rows;
- a window, project or type restriction and a complete local vector copy (``search.vectorcopy``):
  the copy scanned exactly over the documents that pass, checked against SQLite;
- otherwise Chroma's unfiltered top-N, then SQLite says which rows pass. When fewer than the page
  needs pass, a deeper top-N (over-fetch); when still too few, the filtered rows are searched
  exactly: by id when the filter matches at most ``filter_ids_cap`` rows, else with a Chroma
  ``where`` on the window/project/kind/type (then the rest is checked in SQLite).
Observations searched as evidence for prompts (linked evidence, ``search.links``) ride along.
"""

from __future__ import annotations

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
from memsync.search.coverage import coverage
from memsync.search.models import Coverage, Key, Scope
from memsync.search.plan import Plan
from memsync.search.sql import SourceRows
from memsync.search.stopwatch import Stopwatch
from memsync.search.threads import one_blas_thread
from memsync.search.vectorcopy import COPY_FILTERS, VectorCopy
from memsync.search.vectorstore import RowHit, VectorStore, VectorUnavailable

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
    unavailable: str | None = None  # why the vector store could not answer (the search falls back)
    coverage: Coverage | None = None  # the part of the scope a first sync has not embedded yet
    query: Vector | None = None  # the query's vector (the relevance model's cosines for rows not found here)


class SemanticSide:
    """The semantic side of one search over the vector store; see the module docstring."""

    def __init__(self, settings: Settings, store: VectorStore) -> None:
        self.settings = settings
        self.store = store
        self.copy_damaged: str | None = None  # why the vector copy was not used, when it is damaged
        self.watch = Stopwatch()  # this search's stages

    def search(self, plan: Plan) -> SemanticAnswer:
        """The rows nearest to the query within the plan's scope (at least ``need`` of the searched
        kinds when that many exist); with linked evidence, also the evidence rows nearest the query,
        for the prompts they were recorded under; with the context list, the prompts ranked in the
        context of their neighbours too (``search.context``). Raises VectorUnavailable when the
        store cannot answer."""
        self.store.ensure()  # before opening anything: a down store costs nothing more
        rows = SourceRows.open(self.settings)
        try:
            with one_blas_thread():
                answer = self._search(rows, plan)
        finally:
            rows.close()
        self.watch.total("semantic")
        answer.timings = self.watch.timings
        return answer

    def _search(self, rows: SourceRows, plan: Plan) -> SemanticAnswer:
        with self.watch.stage("embed"):
            vec = self.store.embed(plan.query)
        hits, copy = self._nearest(rows, plan, vec)
        answer = SemanticAnswer([h for h in hits if h.kind in plan.kinds], {(h.kind, h.id): h for h in hits})
        answer.query = vec
        with self.watch.stage("coverage"):  # one stat, unless a first sync is under way
            answer.coverage = coverage(self.settings, rows, self.store.collection_name(), plan)
        if plan.evidence_kinds:
            answer.evidence = [(h.kind, h.id) for h in hits if h.kind in plan.evidence_kinds]
        if plan.context or plan.evidence_kinds:
            # Opened once: the context list and linked evidence share it (never a copy found damaged).
            answer.copy = copy or (None if self.copy_damaged else self.vector_copy())
        if plan.context:
            with self.watch.stage("context"):
                if answer.copy is not None:
                    prompts = [h.id for h in answer.hits if h.kind is Kind.PROMPT][:plan.depth]
                    answer.context = prompt_context.ranking(rows, answer.copy, vec, prompts, plan.scope)
        if self.copy_damaged:
            answer.note = f"semantic: Chroma (vector copy damaged, the worker rebuilds it: {self.copy_damaged})"
        return answer

    def _nearest(self, rows: SourceRows, plan: Plan, vec: Vector) -> tuple[list[RowHit], VectorCopy | None]:
        """The nearest rows of the wanted kinds within the scope, by the cheapest strategy that loses
        none, and the vector copy that answered (None: Chroma did)."""
        filters, window = plan.filters, plan.window
        restricted = bool(filters.named()) or window.start_ms is not None or window.end_ms is not None
        # The copy's entries know kind, project, type and time, not concepts, files, platform or
        # any other filter: a search filtered by those goes to Chroma and the rows that pass (a rare
        # platform would otherwise make the copy score the whole window again and again).
        copy = self.vector_copy() if restricted and filters.supported(COPY_FILTERS) else None
        if copy is not None:
            # Exact over the documents that pass, from the local copy: no over-fetch, no loss.
            try:
                with self.watch.stage("vector_copy"):
                    return self._copy_scan(rows, copy, vec, plan), copy
            except (IndexError, ValueError) as exc:
                # Trigger: the copy was damaged in place after this process checked it. Why: a
                # search never raises for a derived file. Outcome: Chroma answers, the worker's
                # next check of the copy rebuilds it.
                self.copy_damaged = f"{type(exc).__name__}: {exc}"[:120]
        with self.watch.stage("vector_query"):
            hits, exhaustive = self.store.nearest_docs(vec, plan.depth)
        if not restricted:
            return hits, None
        # Filters before the cut: the filtered rows of the unfiltered top-N are the true filtered
        # top rows as far as they go; when too few pass, look deeper (over-fetch), then search
        # exactly the rows that pass (by id, or with a Chroma where).
        passing = passing_hits(rows, hits, plan.wanted, plan.scope)
        found = sum(h.kind in plan.kinds for h in passing)
        if not exhaustive and found < plan.need:
            # Deeper, as deep as the pass rate seen so far says is needed (twice, for margin):
            # a top-5,000 query costs ~30 ms at 313k documents, Chroma's `where` 400-1,000 ms.
            with self.watch.stage("vector_overfetch"):
                rate = max(found, 1) / max(1, sum(h.kind in plan.kinds for h in hits))
                deeper = min(MAX_OVERFETCH, max(plan.depth * OVERFETCH,
                                                int(2 * plan.need / rate * plan.depth / max(1, len(hits)))))
                hits, exhaustive = self.store.nearest_docs(vec, deeper)
                passing = passing_hits(rows, hits, plan.wanted, plan.scope)
        if not exhaustive and sum(h.kind in plan.kinds for h in passing) < plan.need:
            with self.watch.stage("vector_exact"):
                passing = self._exact(rows, vec, plan)
        return passing, None

    def vector_copy(self) -> VectorCopy | None:
        """The local vector copy of the active generation, when this data directory has a complete
        and undamaged one (a damaged one's reason is kept in ``copy_damaged``)."""
        copy, damaged = VectorCopy.open_checked(self.settings, self.store.collection_name(),
                                                self.store.embedder.model_id, self.store.embedder.dimension)
        self.copy_damaged = self.copy_damaged or damaged
        return copy

    def _copy_scan(self, rows: SourceRows, copy: VectorCopy, vec: Vector, plan: Plan) -> list[RowHit]:
        """The nearest rows within the scope from the copy, checked against SQLite (the copy's
        metadata can trail an edit by a sync pass); deeper while too few of them pass. Times its
        stages (candidates, scoring, SQLite's confirmation)."""
        with self.watch.stage("copy_candidates"):
            positions = copy.candidates(plan.wanted, plan.filters, plan.window)
        n_docs = plan.depth * 3
        while True:
            with self.watch.stage("copy_score"):
                hits, exhaustive = copy.nearest(vec, positions, n_docs)
            with self.watch.stage("copy_confirm"):
                passing = passing_hits(rows, hits, plan.wanted, plan.scope)
            if exhaustive or sum(h.kind in plan.kinds for h in passing) >= plan.need:
                return passing
            n_docs *= 4

    def _exact(self, rows: SourceRows, vec: Vector, plan: Plan) -> list[RowHit]:
        """Nearest rows among exactly those within the scope: a query restricted to their
        documents. Which documents exist comes from the sync records when this data directory has
        them (one local read), else from Chroma (one round trip per 8,000 possible ids). More than
        ``filter_ids_cap`` rows of a kind: a Chroma ``where`` instead."""
        passing: dict[Kind, list[int]] = {}
        for kind in plan.wanted:
            ids = rows.filtered_ids(kind, plan.filters, plan.window, self.settings.filter_ids_cap)
            if ids is None:
                return self._where(rows, vec, plan)
            passing[kind] = ids
        synced: list[str] | None = []
        collection = self.store.collection_name()
        for kind, ids in passing.items():
            found = synced_doc_ids(self.settings.state_path, collection, kind, ids)
            synced = None if found is None or synced is None else synced + found
        if synced is not None:
            try:
                return self.store.nearest(vec, plan.depth * 3, ids=synced, verified=True)
            except VectorUnavailable:
                pass  # a record ahead of the store (a delete in flight): ask the store itself
        doc_ids: list[str] = []
        for kind, ids in passing.items():
            facts = rows.fact_counts(ids) if kind is Kind.OBSERVATION else {}
            for i in ids:
                doc_ids.extend(possible_doc_ids(kind, i, facts.get(i, 0)))
        return self.store.nearest(vec, plan.depth * 3, ids=doc_ids)

    def _where(self, rows: SourceRows, vec: Vector, plan: Plan) -> list[RowHit]:
        """Many rows pass: let Chroma filter on the metadata it has (window, project, kind, type),
        then check the rest (concepts, files) and everything again in SQLite."""
        kinds, filters, window = plan.wanted, plan.filters, plan.window
        clauses: list[dict[str, Any]] = []
        if window.start_ms is not None:
            clauses.append({"created_at_epoch": {"$gte": window.start_ms}})
        if window.end_ms is not None:
            clauses.append({"created_at_epoch": {"$lte": window.end_ms}})
        if len(kinds) < len(KINDS):
            clauses.append({"doc_type": {"$in": [DOC_TYPES[k] for k in kinds]}})
        if filters.types:
            clauses.append({"type": {"$in": list(filters.types)}})
        if names := filters.projects():
            value: str | dict[str, list[str]] = names[0] if len(names) == 1 else {"$in": list(names)}
            clauses.append({"$or": [{"project": value}, {"merged_into_project": value}]})
        if filters.platform:  # stored normalised (documents version 2)
            clauses.append({"platform_source": normalize_platform(filters.platform)})
        where: dict[str, Any] | None = None
        if len(clauses) == 1:
            where = clauses[0]
        elif clauses:
            where = {"$and": clauses}
        hits = self.store.nearest(vec, plan.depth * 3, where=where)
        return passing_hits(rows, hits, kinds, plan.scope)


def passing_hits(rows: SourceRows, hits: list[RowHit], kinds: set[Kind], scope: Scope) -> list[RowHit]:
    """The hits (of ``kinds``) whose rows exist and pass the scope's filters and window, in their order."""
    keep: set[Key] = set()
    for kind in kinds:
        ids = [h.id for h in hits if h.kind is kind]
        keep.update((kind, i) for i in rows.passing(kind, ids, scope.filters, scope.window))
    return [h for h in hits if (h.kind, h.id) in keep]
