"""The search engine: hybrid retrieval (Chroma + FTS5), filters before the cut, hydration, and the
lookups built on it (timeline, recent context, get, similar).

How a query is answered (``Searcher.search``):
1. Lexical: per kind, FTS5 BM25 of an OR of quoted tokens, with every filter and the window in
   the same SQL statement, so nothing inside the filters is cut by rows outside them.
2. Semantic: the query embedded by the worker's model; Chroma's unfiltered top-N (fast, 2-5 ms)
   collapsed onto rows, then SQLite says which rows pass the filters and window. When fewer than
   the page needs pass, the filtered rows are searched exactly: by id when the filter matches at
   most ``filter_ids_cap`` rows, else with a Chroma ``where`` on the window/project/kind
   (design note 6: pick by cost, lose nothing).
3. Linked signals: an observation is recorded under a user prompt (same session and
   ``prompt_number``); when prompts are searched, observations that match vouch for their prompt.
4. Fusion (search.fusion), then hydration with one ``IN`` query per kind in fused order. Date
   order asks SQLite for the newest/oldest matches rather than re-sorting the top-N.
If Chroma is down, slow, erroring or empty, the lexical answer is returned as
``lexical_fallback`` with the reason; nothing raises to the caller for a bad query string.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.docids import possible_doc_ids
from memsync.config.embedding import Embedder, get_embedder
from memsync.config.formats.sync_records import synced_doc_ids
from memsync.config.records import RecordRefError, ms_from_iso, parse_record_ref
from memsync.config.settings import Settings
from memsync.search import fts
from memsync.search.fusion import Ranked, Weights, fuse
from memsync.search.models import Filters, Format, Mode, Order, Response, Result, Signal, Window
from memsync.search.rows import QueryTimeout, SourceRows, title_of
from memsync.search.semantic import RowHit, VectorSide, VectorUnavailable
from memsync.search.textindex import TextIndex, merge_tail
from memsync.search.vectorcopy import VectorCopy

Key = tuple[Kind, int]
EXCLUDED_CAP = 100  # counting matches outside the window stops here per kind (then: "at least")
OVERFETCH = 5  # second, deeper look before searching the filtered rows exactly ...
MAX_OVERFETCH = 5000  # ... at most this many documents deep
DATE_ORDER_MIN_SIMILARITY = 0.35  # a semantic candidate counts as a match for date order above this


class SearchError(ValueError):
    """A request the engine cannot answer (bad anchor, unknown id); the message says why."""


def make_window(days: int | None, default_days: int, date_from: datetime | None = None,
                date_to: datetime | None = None, now: datetime | None = None) -> Window:
    """The window applied: a date range replaces the recency window; 0 days = all time."""
    if date_from or date_to:
        return Window(0, int(date_from.timestamp() * 1000) if date_from else None,
                      int(date_to.timestamp() * 1000) if date_to else None, "date_range")
    d = default_days if days is None else days
    if d < 0:
        raise SearchError("window_days must be 0 (all time) or positive")
    if d == 0:
        return Window(0, None, None, "all_time")
    now = now or datetime.now(UTC)
    return Window(d, int((now - timedelta(days=d)).timestamp() * 1000), None, "window")


class _Expressions:
    """The query's MATCH expression per kind, built on first use (terms depend on each table)."""

    def __init__(self, rows: SourceRows, text: str) -> None:
        self._rows, self.text = rows, text
        self._cache: dict[Kind, str | None] = {}

    def __getitem__(self, kind: Kind) -> str | None:
        if kind not in self._cache:
            self._cache[kind] = self._rows.expression(kind, self.text)
        return self._cache[kind]


@dataclass
class _Gathered:
    lexical: dict[Kind, list[int]] = field(default_factory=dict)
    semantic: list[RowHit] = field(default_factory=list)
    linked_semantic: list[int] = field(default_factory=list)
    linked_lexical: list[int] = field(default_factory=list)
    similarity: dict[Key, RowHit] = field(default_factory=dict)


class Searcher:
    """The search library's entry point; one per process (thread-safe), cheap to keep open."""

    def __init__(self, settings: Settings, embedder: Embedder | None = None, weights: Weights | None = None) -> None:
        self.settings = settings
        self.weights = weights or Weights()
        self._embedder = embedder
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=6, thread_name_prefix="memsync-search")
        self._vector: VectorSide | None = None

    @property
    def vector(self) -> VectorSide:
        """The vector side (the embedding model is loaded on first use)."""
        if self._vector is None:
            embedder = self._embedder or get_embedder(
                self.settings.embedding_model, self.settings.embedding_batch_size,
                self.settings.embedding_max_tokens, self.settings.search_embedding_threads)
            self._vector = VectorSide(self.settings, embedder)
        return self._vector

    def close(self) -> None:
        """Release the threads held by the engine and its vector side."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._vector is not None:
            self._vector.close()

    def _rows(self) -> SourceRows:
        rows = SourceRows(self.settings.db, self.settings.sqlite_busy_timeout_ms, self.settings.fts_timeout_ms)
        if not all(rows.has_fts(k) for k in KINDS):
            from memsync.search.lexical_index import LexicalIndex

            rows.lexical_index = LexicalIndex.refreshed(self.settings, rows)
        return rows

    # -- search ----------------------------------------------------------------------------------
    def search(self, query: str, kinds: Sequence[Kind] | None = None, filters: Filters | None = None,
               window_days: int | None = None, limit: int = 20, offset: int = 0,
               order: Order = Order.RELEVANCE, format: Format = Format.INDEX,
               mode: Mode = Mode.HYBRID) -> Response:
        """Hybrid search; see the module docstring. ``mode`` LEXICAL or SEMANTIC uses one side only."""
        if limit < 1 or offset < 0:
            raise SearchError("limit must be at least 1 and offset at least 0")
        filters = filters or Filters()
        kinds = tuple(kinds or KINDS)
        window = make_window(window_days, self.settings.window_days, filters.date_from, filters.date_to)
        timings: dict[str, float] = {}
        query = query.replace("\x00", " ") if isinstance(query, str) else ""
        rows = self._rows()
        try:
            t0 = time.perf_counter()
            if not fts.tokens(query):
                return self._listing(rows, query, kinds, filters, window, limit, offset, order, format, timings)
            need = offset + limit
            depth = max(self.settings.candidates, need)
            got = _Gathered()
            answered, notes = mode, []
            # The two sides run at once: the vector side (embedding, Chroma, its own SQLite
            # connection) on a pool thread, the lexical side here; both mostly wait outside the GIL.
            # Linked evidence (observations vouching for the prompt they were recorded under) only
            # when prompts are searched without observations: with both, each observation is a
            # result of its own, and boosting its prompt too would count the same evidence twice
            # (prompts then crowded observations out of mixed results).
            linked = mode is Mode.HYBRID and Kind.PROMPT in kinds and Kind.OBSERVATION not in kinds
            sem_future = None
            if mode is not Mode.LEXICAL:
                sem_future = self._pool.submit(self._semantic_side, query, kinds, filters, window, need, depth,
                                               linked)
            exprs = _Expressions(rows, query)
            index = TextIndex.open(self.settings) if self.settings.text_index and mode is not Mode.SEMANTIC else None
            if mode is not Mode.SEMANTIC:
                try:
                    self._lexical(rows, exprs, kinds, filters, window, depth, got, linked, index)
                except QueryTimeout as exc:  # keep what was gathered; say that the rest is missing
                    notes.append(f"full-text search incomplete: {exc}")
            timings["lexical"] = _ms(t0)
            if sem_future is not None:
                try:
                    sem, sem_timings = sem_future.result()
                    got.semantic, got.similarity = sem.semantic, sem.similarity
                    got.linked_semantic = sem.linked_semantic
                    timings.update(sem_timings)
                except VectorUnavailable as exc:
                    if mode is Mode.SEMANTIC:
                        return Response(Mode.LEXICAL_FALLBACK, [], window, reason=str(exc), query=query,
                                        timings_ms=timings)
                    answered = Mode.LEXICAL_FALLBACK
                    notes.insert(0, str(exc))
                except QueryTimeout as exc:
                    notes.append(f"semantic filtering incomplete: {exc}")
            t2 = time.perf_counter()
            if order is Order.RELEVANCE:
                fused = self._fuse(got, answered)
                total = len(fused)
                page = fused[offset:need]
            else:
                page, total = self._date_order(rows, exprs, kinds, filters, window, got, need, order)
                page = page[offset:need]
            timings["fuse"] = _ms(t2)
            t3 = time.perf_counter()
            try:
                excluded = (self._excluded(rows, exprs, kinds, filters, window, index)
                            if window.source == "window" else 0)
            except QueryTimeout:
                excluded = 0
            timings["window_count"] = _ms(t3)
            t4 = time.perf_counter()
            results = self._hydrate(rows, page, got, format)
            timings["hydrate"] = _ms(t4)
            timings["total"] = _ms(t0)
            return Response(answered, results, window, excluded, "; ".join(notes) or None, total, timings, query)
        except QueryTimeout as exc:
            raise SearchError(f"the database did not answer in time ({exc}); try again") from exc
        finally:
            rows.close()

    def _lexical(self, rows: SourceRows, exprs: _Expressions, kinds: Sequence[Kind], filters: Filters,
                 window: Window, depth: int, got: _Gathered, linked: bool, index: TextIndex | None) -> None:
        # One table per thread (each with its own connection; SQLite runs outside the GIL): the
        # largest table here, the others on the pool.
        tasks: list[tuple[Kind, Filters]] = [(k, filters) for k in kinds]
        if Kind.PROMPT in kinds and linked and Kind.OBSERVATION not in kinds:
            tasks.append((Kind.OBSERVATION, _linked_filters(filters)))
        here, rest = tasks[:1], tasks[1:]
        if all(_watermark(index, k, f) is not None for k, f in tasks):
            # The text index answers in well under a millisecond per kind: a thread and a connection
            # per kind would cost more than they save.
            here, rest = tasks, []
        futures = [self._pool.submit(self._lexical_one, None, exprs.text, k, f, window, depth, index)
                   for k, f in rest]
        results = {k: self._lexical_one(rows, exprs.text, k, f, window, depth, index) for k, f in here}
        for (kind, _), future in zip(rest, futures, strict=True):
            results[kind] = future.result()
        for kind in kinds:
            got.lexical[kind] = results[kind]
        if Kind.PROMPT in kinds and linked:
            lex_obs = results.get(Kind.OBSERVATION)
            got.linked_lexical = self._linked(rows, lex_obs or [], filters, window)

    def _lexical_one(self, rows: SourceRows | None, text: str, kind: Kind, filters: Filters, window: Window,
                     depth: int, index: TextIndex | None) -> list[int]:
        """One kind's lexical ranking: memsync's text index for the rows it holds plus FTS5 for the
        newer ones (see search.textindex), or FTS5 alone."""
        own = rows is None
        rows = rows or self._rows()
        try:
            if not rows.applicable(kind, filters):
                return []
            mark = _watermark(index, kind, filters)
            if index is None or mark is None:
                expr = rows.expression(kind, text)
                return [i for i, _ in rows.lexical(kind, expr, filters, window, depth)] if expr else []
            ranked = [i for i, _ in index.search(kind, text, filters, window, depth)]
            tail: list[int] = []
            if rows.max_id(kind) > mark:
                expr = rows.expression(kind, text)
                tail = [i for i, _ in rows.lexical(kind, expr, filters, window, depth, after_id=mark)] if expr else []
            return merge_tail(ranked, tail, depth)
        finally:
            if own:
                rows.close()

    def _semantic_side(self, query: str, kinds: Sequence[Kind], filters: Filters, window: Window, need: int,
                       depth: int, linked: bool) -> tuple[_Gathered, dict[str, float]]:
        t = time.perf_counter()
        got, timings = _Gathered(), dict[str, float]()
        self.vector.ensure()  # before opening anything: a down store costs nothing more
        rows = self._rows()
        try:
            self._semantic(rows, query, kinds, filters, window, need, depth, got, timings, linked)
        finally:
            rows.close()
        timings["semantic"] = _ms(t)
        return got, timings

    def _semantic(self, rows: SourceRows, query: str, kinds: Sequence[Kind], filters: Filters, window: Window,
                  need: int, depth: int, got: _Gathered, timings: dict[str, float], linked: bool) -> None:
        t = time.perf_counter()
        self.vector.ensure()
        vec = self.vector.embed(query)
        timings["embed"] = _ms(t)
        restricted = bool(filters.project or filters.types or filters.concepts or filters.files
                          or window.start_ms is not None or window.end_ms is not None)
        linked_kinds = (Kind.OBSERVATION,) if Kind.PROMPT in kinds and linked else ()
        wanted = set(kinds) | set(linked_kinds)
        copy = self._vector_copy() if restricted and not (filters.concepts or filters.files) else None
        if copy is not None:
            # Exact over the documents that pass, from the local copy: no over-fetch, no loss.
            hits = self._copy_semantic(rows, copy, vec, kinds, wanted, filters, window, need, depth)
            timings["vector_copy"] = _ms(t) - timings["embed"]
            restricted = False
        else:
            hits, exhaustive = self.vector.nearest_docs(vec, depth)
            timings["vector_query"] = _ms(t) - timings["embed"]
        if restricted:
            # Filters before the cut: the filtered rows of the unfiltered top-N are the true
            # filtered top rows as far as they go; when too few pass, look deeper (over-fetch),
            # then search exactly the rows that pass (by id, or with a Chroma where).
            passing = self._passing(rows, hits, wanted, filters, window)
            found = sum(h.kind in kinds for h in passing)
            if not exhaustive and found < need:
                # Deeper, as deep as the pass rate seen so far says is needed (twice, for margin):
                # a top-5,000 query costs ~30 ms at 313k documents, Chroma's `where` 400-1,000 ms.
                rate = max(found, 1) / max(1, sum(h.kind in kinds for h in hits))
                deeper = min(MAX_OVERFETCH, max(depth * OVERFETCH, int(2 * need / rate * depth / max(1, len(hits)))))
                hits, exhaustive = self.vector.nearest_docs(vec, deeper)
                passing = self._passing(rows, hits, wanted, filters, window)
                timings["vector_overfetch"] = _ms(t) - timings["embed"] - timings["vector_query"]
            if not exhaustive and sum(h.kind in kinds for h in passing) < need:
                passing = self._exact_semantic(rows, vec, wanted, filters, window, depth)
                timings["vector_exact"] = _ms(t) - timings["embed"] - timings["vector_query"]
            hits = passing
        got.semantic = [h for h in hits if h.kind in kinds]
        got.similarity = {(h.kind, h.id): h for h in hits}
        if linked_kinds:
            obs = [h.id for h in hits if h.kind is Kind.OBSERVATION]
            got.linked_semantic = self._linked(rows, obs, filters, window)

    def _vector_copy(self) -> VectorCopy | None:
        """The local vector copy of the active generation, when this data directory has a complete one."""
        return VectorCopy.open(self.settings, self.vector.collection_name(), self.vector.embedder.model_id,
                               self.vector.embedder.dimension)

    def _copy_semantic(self, rows: SourceRows, copy: VectorCopy, vec: Any, kinds: Sequence[Kind], wanted: set[Kind],
                       filters: Filters, window: Window, need: int, depth: int) -> list[RowHit]:
        """The nearest rows within filters/window from the copy, checked against SQLite (the copy's
        metadata can trail an edit by a sync pass); deeper while too few of them pass."""
        positions = copy.candidates(wanted, filters, window)
        n_docs = depth * 3
        while True:
            hits, exhaustive = copy.nearest(vec, positions, n_docs)
            passing = self._passing(rows, hits, wanted, filters, window)
            if exhaustive or sum(h.kind in kinds for h in passing) >= need:
                return passing
            n_docs *= 4

    def _passing(self, rows: SourceRows, hits: list[RowHit], kinds: set[Kind], filters: Filters,
                 window: Window) -> list[RowHit]:
        keep: set[Key] = set()
        for kind in kinds:
            ids = [h.id for h in hits if h.kind is kind]
            keep.update((kind, i) for i in rows.passing(kind, ids, filters, window))
        return [h for h in hits if (h.kind, h.id) in keep]

    def _exact_semantic(self, rows: SourceRows, vec: Any, kinds: set[Kind], filters: Filters, window: Window,
                        depth: int) -> list[RowHit]:
        """Nearest rows among exactly those within filters/window: a query restricted to their
        documents. Which documents exist comes from the sync records when this data directory has
        them (one local read), else from Chroma (one round trip per 8,000 possible ids)."""
        passing: dict[Kind, list[int]] = {}
        for kind in kinds:
            ids = rows.filtered_ids(kind, filters, window, self.settings.filter_ids_cap)
            if ids is None:
                return self._where_semantic(rows, vec, kinds, filters, window, depth)
            passing[kind] = ids
        synced: list[str] | None = []
        collection = self.vector.collection_name()
        for kind, ids in passing.items():
            found = synced_doc_ids(self.settings.state_path, collection, kind, ids)
            synced = None if found is None or synced is None else synced + found
        if synced is not None:
            try:
                return self.vector.nearest(vec, depth * 3, ids=synced, verified=True)
            except VectorUnavailable:
                pass  # a record ahead of the store (a delete in flight): ask the store itself
        doc_ids: list[str] = []
        for kind, ids in passing.items():
            facts = rows.fact_counts(ids) if kind is Kind.OBSERVATION else {}
            for i in ids:
                doc_ids.extend(possible_doc_ids(kind, i, facts.get(i, 0)))
        return self.vector.nearest(vec, depth * 3, ids=doc_ids)

    def _where_semantic(self, rows: SourceRows, vec: Any, kinds: set[Kind], filters: Filters, window: Window,
                        depth: int) -> list[RowHit]:
        """Many rows pass: let Chroma filter on the metadata it has (window, project, kind), then
        check the rest (types, concepts, files) in SQLite."""
        clauses: list[dict[str, Any]] = []
        if window.start_ms is not None:
            clauses.append({"created_at_epoch": {"$gte": window.start_ms}})
        if window.end_ms is not None:
            clauses.append({"created_at_epoch": {"$lte": window.end_ms}})
        doc_types = {Kind.OBSERVATION: "observation", Kind.SUMMARY: "session_summary", Kind.PROMPT: "user_prompt"}
        if len(kinds) < len(KINDS):
            clauses.append({"doc_type": {"$in": [doc_types[k] for k in kinds]}})
        if filters.types:
            clauses.append({"type": {"$in": list(filters.types)}})
        if filters.project:
            clauses.append({"$or": [{"project": filters.project}, {"merged_into_project": filters.project}]})
        where: dict[str, Any] | None = None
        if len(clauses) == 1:
            where = clauses[0]
        elif clauses:
            where = {"$and": clauses}
        hits = self.vector.nearest(vec, depth * 3, where=where)
        return self._passing(rows, hits, kinds, filters, window)

    def _linked(self, rows: SourceRows, obs_ids: list[int], filters: Filters, window: Window) -> list[int]:
        """Prompts the observations (in rank order) were recorded under, within filters/window."""
        links = rows.prompts_of_observations(obs_ids)
        prompts = list(dict.fromkeys(links[o] for o in obs_ids if o in links))
        ok = rows.passing(Kind.PROMPT, prompts, filters, window)
        return [p for p in prompts if p in ok]

    def _fuse(self, got: _Gathered, answered: Mode) -> list[tuple[Key, float, bool, bool]]:
        w = self.weights
        lists = [Ranked([(k, i) for i in ids], w.lexical, False) for k, ids in got.lexical.items()]
        lists.append(Ranked([(h.kind, h.id) for h in got.semantic], w.semantic, True))
        lists.append(Ranked([(Kind.PROMPT, i) for i in got.linked_semantic], w.linked_semantic, True))
        lists.append(Ranked([(Kind.PROMPT, i) for i in got.linked_lexical], w.linked_lexical, False))
        return [(_key(k), s, sem, lex) for k, s, sem, lex in fuse(lists, w.k)]

    def _date_order(self, rows: SourceRows, exprs: _Expressions, kinds: Sequence[Kind], filters: Filters,
                    window: Window, got: _Gathered, need: int, order: Order
                    ) -> tuple[list[tuple[Key, float, bool, bool]], int]:
        """The newest (oldest) matches: SQLite's own date-ordered lexical matches, merged with the
        semantic candidates that are real matches, by date."""
        direction = "newest" if order is Order.NEWEST else "oldest"
        dated: dict[Key, tuple[int, bool, bool]] = {}
        for kind in kinds:
            expr = exprs[kind]
            if expr:
                ids = [i for i, _ in rows.lexical(kind, expr, filters, window, need, order=direction)]
                for i, epoch in rows.epochs(kind, ids).items():
                    dated[(kind, i)] = (epoch, False, True)
        sem = [h for h in got.semantic if h.similarity >= DATE_ORDER_MIN_SIMILARITY]
        for kind in kinds:
            ids = [h.id for h in sem if h.kind is kind]
            for i, epoch in rows.epochs(kind, ids).items():
                prev = dated.get((kind, i))
                dated[(kind, i)] = (epoch, True, prev is not None)
        keys = sorted(dated, key=lambda k: (dated[k][0], k[1]), reverse=order is Order.NEWEST)
        out = [(k, got.similarity[k].similarity if k in got.similarity else 1.0, dated[k][1], dated[k][2])
               for k in keys]
        return out, len(out)

    def _excluded(self, rows: SourceRows, exprs: _Expressions, kinds: Sequence[Kind], filters: Filters,
                  window: Window, index: TextIndex | None) -> int:
        """Rows that match (lexically, or among the semantic candidates) but fall outside the window."""
        outside = Window(0, None, window.start_ms, "before_window") if window.start_ms is not None else None
        if outside is None:
            return 0
        n = 0
        for kind in kinds:
            if not rows.applicable(kind, filters):
                continue
            mark = _watermark(index, kind, filters)
            if index is not None and mark is not None:
                n += index.count(kind, exprs.text, filters, outside)
                if rows.max_id(kind) <= mark:
                    continue
            expr = exprs[kind]
            if expr:
                n += rows.lexical_count(kind, expr, filters, outside, EXCLUDED_CAP, after_id=mark or 0)
        return min(n, EXCLUDED_CAP)

    def _hydrate(self, rows: SourceRows, page: list[tuple[Key, float, bool, bool]], got: _Gathered,
                 format: Format) -> list[Result]:
        by_kind: dict[Kind, list[int]] = {}
        for (kind, i), *_ in page:
            by_kind.setdefault(kind, []).append(i)
        records = {k: rows.hydrate(k, ids) for k, ids in by_kind.items()}
        out: list[Result] = []
        for (kind, i), score, sem, lex in page:
            row = records.get(kind, {}).get(i)
            if row is None:
                continue  # deleted since it was indexed
            hit = got.similarity.get((kind, i))
            out.append(_result(kind, row, score, sem, lex, hit, format))
        return out

    def _listing(self, rows: SourceRows, query: str, kinds: Sequence[Kind], filters: Filters, window: Window,
                 limit: int, offset: int, order: Order, format: Format, timings: dict[str, float]) -> Response:
        """No words in the query: the newest (or oldest) rows within the filters."""
        t = time.perf_counter()
        newest = order is not Order.OLDEST
        dated: list[tuple[int, Key]] = []
        for kind in kinds:
            dated.extend((e, (kind, i)) for i, e in rows.recent(kind, filters, window, offset + limit, 0, newest))
        dated.sort(key=lambda x: (x[0], x[1][1]), reverse=newest)
        page = [(k, 1.0, False, True) for _, k in dated[offset:offset + limit]]
        results = self._hydrate(rows, page, _Gathered(), format)
        timings["total"] = _ms(t)
        total = sum(rows.count(kind, filters, window) for kind in kinds)
        return Response(Mode.LEXICAL, results, window, 0, "no words in the query: newest records listed",
                        total, timings, query)

    # -- lookups ---------------------------------------------------------------------------------
    def find_by(self, filters: Filters, query: str = "", kinds: Sequence[Kind] | None = None,
                window_days: int | None = None, limit: int = 20, offset: int = 0,
                format: Format = Format.INDEX) -> Response:
        """Filter first in SQLite (concept, file or type), then rank the matches by meaning of
        ``query`` when one is given (recency breaks ties), else newest first. The filter is applied
        before any cut, so no match is lost to rows outside it."""
        order = Order.RELEVANCE if fts.tokens(query) else Order.NEWEST
        return self.search(query, kinds, filters, window_days, limit, offset, order, format)

    def find_by_concept(self, concept: str, query: str = "", **kw: Any) -> Response:
        """Observations tagged with ``concept`` (substring of the concepts list), ranked by ``query``."""
        return self.find_by(Filters(project=kw.pop("project", None), concepts=(concept,)), query,
                            (Kind.OBSERVATION,), **kw)

    def find_by_file(self, path: str, query: str = "", **kw: Any) -> Response:
        """Observations and summaries whose files read/modified contain ``path``, ranked by ``query``."""
        return self.find_by(Filters(project=kw.pop("project", None), files=(path,)), query,
                            (Kind.OBSERVATION, Kind.SUMMARY), **kw)

    def find_by_type(self, types: str | Sequence[str], query: str = "", **kw: Any) -> Response:
        """Observations of the given type(s) (e.g. bugfix, feature), ranked by ``query``."""
        wanted = (types,) if isinstance(types, str) else tuple(types)
        return self.find_by(Filters(project=kw.pop("project", None), types=wanted), query, (Kind.OBSERVATION,), **kw)

    def get(self, kind: Kind, ids: Sequence[int]) -> tuple[list[dict[str, Any]], list[int]]:
        """Full records in the requested order, and the ids that do not exist."""
        rows = self._rows()
        try:
            found = rows.hydrate(kind, list(ids))
        finally:
            rows.close()
        return [found[i] for i in ids if i in found], [i for i in ids if i not in found]

    def observation_types(self) -> list[str]:
        """The observation types this database uses (for validating a type filter)."""
        rows = self._rows()
        try:
            return rows.distinct(Kind.OBSERVATION, "type")
        finally:
            rows.close()

    def projects(self) -> list[str]:
        """The projects that have observations or summaries, sorted."""
        rows = self._rows()
        try:
            return sorted(set(rows.distinct(Kind.OBSERVATION, "project")) | set(rows.distinct(Kind.SUMMARY, "project")))
        finally:
            rows.close()

    def recent_context(self, project: str | None = None, limit: int = 10,
                       kinds: Sequence[Kind] = (Kind.SUMMARY, Kind.OBSERVATION)) -> list[Result]:
        """The newest summaries and observations (of a project), newest first."""
        return self.search("", kinds, Filters(project=project), 0, limit, order=Order.NEWEST).results

    def timeline(self, anchor: str, depth_before: int = 5, depth_after: int = 5,
                 project: str | None = None, format: Format = Format.INDEX) -> tuple[list[Result], Key]:
        """Records around an anchor, chronological, counted in records; returns them and the
        anchor's key (also marked with ``field='anchor'``). Anchor: ``123``/``#123`` (observation),
        ``S123`` (summary), ``P123`` (prompt), an ISO timestamp, or a query (its best match)."""
        if depth_before < 0 or depth_after < 0:
            raise SearchError("depths must be 0 or more")
        rows = self._rows()
        try:
            key, epoch = self._anchor(rows, anchor, project)
            candidates: dict[Key, int] = {}
            for kind in KINDS:
                for i, e in rows.around(kind, epoch, project, True, depth_before + 1, inclusive=True):
                    candidates[(kind, i)] = e
                for i, e in rows.around(kind, epoch, project, False, depth_after + 1, inclusive=True):
                    candidates[(kind, i)] = e
            kind_order = {Kind.PROMPT: 0, Kind.OBSERVATION: 1, Kind.SUMMARY: 2}
            ordered = sorted(candidates, key=lambda k: (candidates[k], kind_order[k[0]], k[1]))
            if key is not None and key not in candidates:
                candidates[key] = epoch
                ordered = sorted(candidates, key=lambda k: (candidates[k], kind_order[k[0]], k[1]))
            if key is None:  # a timestamp: the anchor is the first record at or after it
                after = [k for k in ordered if candidates[k] >= epoch]
                key = after[0] if after else (ordered[-1] if ordered else None)
            if key is None:
                return [], (Kind.OBSERVATION, 0)
            pos = ordered.index(key)
            window_keys = ordered[max(0, pos - depth_before):pos + depth_after + 1]
            page = [(k, 1.0, False, False) for k in window_keys]
            results = self._hydrate(rows, page, _Gathered(), format)
            for r in results:
                r.signals = Signal.LEXICAL
                if r.key == key:
                    r.field = "anchor"
            return results, key
        finally:
            rows.close()

    def _anchor(self, rows: SourceRows, anchor: str, project: str | None) -> tuple[Key | None, int]:
        text = anchor.strip()
        try:
            kind, i = parse_record_ref(text)
        except RecordRefError:
            pass
        else:
            epochs = rows.epochs(kind, [i])
            if i not in epochs:
                raise SearchError(f"no {kind.value} with id {i}")
            return (kind, i), epochs[i]
        try:
            return None, ms_from_iso(text)
        except RecordRefError:
            pass
        found = self.search(text, None, Filters(project=project), 0, 1)
        if not found.results:
            raise SearchError(f"nothing matches {text[:80]!r}")
        best = found.results[0]
        return best.key, int(best.created_at_epoch or 0)

    def similar(self, observation_id: int, limit: int = 10, window_days: int | None = 0
                ) -> tuple[list[Result], Mode, str | None]:
        """Past rows most like an observation, best first; ``field == 'near_duplicate'`` marks rows
        at or above the near-duplicate cosine (settings.near_duplicate). Falls back to a lexical
        search on the observation's own text when Chroma cannot answer."""
        rows = self._rows()
        try:
            found = rows.hydrate(Kind.OBSERVATION, [observation_id])
            if observation_id not in found:
                raise SearchError(f"no observation with id {observation_id}")
            row = found[observation_id]
            facts = row.get("facts") if isinstance(row.get("facts"), list) else []
            doc_ids = possible_doc_ids(Kind.OBSERVATION, observation_id, len(facts or []))
        finally:
            rows.close()
        text = " ".join(str(row.get(k) or "") for k in ("title", "subtitle", "narrative", "text"))
        try:
            vectors = self.vector.vectors(doc_ids)
            if not vectors:
                raise VectorUnavailable(f"observation {observation_id} is not synced yet")
            import numpy as np

            mean = np.mean(list(vectors.values()), axis=0)
            mean /= float(np.linalg.norm(mean)) or 1.0
            hits = self.vector.nearest(mean.astype(np.float32), self.settings.candidates)
        except VectorUnavailable as exc:
            resp = self.search(text, None, None, window_days, limit + 1, mode=Mode.LEXICAL)
            results = [r for r in resp.results if r.key != (Kind.OBSERVATION, observation_id)][:limit]
            return results, Mode.LEXICAL_FALLBACK, str(exc)
        hits = [h for h in hits if (h.kind, h.id) != (Kind.OBSERVATION, observation_id)]
        window = make_window(window_days, self.settings.window_days)
        rows = self._rows()
        try:
            if window.start_ms is not None:
                hits = self._passing(rows, hits, set(KINDS), Filters(), window)
            page = [((h.kind, h.id), h.similarity, True, False) for h in hits[:limit]]
            got = _Gathered(similarity={(h.kind, h.id): h for h in hits})
            results = self._hydrate(rows, page, got, Format.INDEX)
        finally:
            rows.close()
        for r in results:
            if r.similarity is not None and r.similarity >= self.settings.near_duplicate:
                r.field = "near_duplicate"
        return results, Mode.SEMANTIC, None


def _watermark(index: TextIndex | None, kind: Kind, filters: Filters) -> int | None:
    """The text index's watermark for ``kind`` when it can answer this search, else None."""
    return index.watermark(kind) if index is not None and index.supports(filters) else None


def _linked_filters(filters: Filters) -> Filters:
    """Observations used as evidence for prompts: only project and dates carry over."""
    return Filters(project=filters.project, date_from=filters.date_from, date_to=filters.date_to)


def _key(key: Hashable) -> Key:
    assert isinstance(key, tuple)
    return (Kind(key[0]), int(key[1]))


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def _result(kind: Kind, row: dict[str, Any], score: float, sem: bool, lex: bool, hit: RowHit | None,
            format: Format) -> Result:
    signal = Signal.BOTH if sem and lex else Signal.SEMANTIC if sem else Signal.LEXICAL
    return Result(
        kind=kind, id=int(row["id"]), score=float(score), signals=signal,
        similarity=hit.similarity if hit else None,
        created_at_epoch=int(row["created_at_epoch"]) if row.get("created_at_epoch") is not None else None,
        project=row.get("project"), type=row.get("type") if kind is Kind.OBSERVATION else None,
        title=title_of(kind, row), field=hit.field if hit else None,
        record=row if format is Format.FULL else None,
    )

