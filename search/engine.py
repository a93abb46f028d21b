"""The search pipeline: both sides at once, linked evidence, fusion, date order, the page, hydration.

How a query is answered (``Searcher.search``):
1. Lexical (``search.lexical``): per kind, BM25 from memsync's text index, with FTS5 for the rows
   newer than it and as the fallback when there is no text index; filters and window inside the
   index query, so nothing inside the filters is cut by rows outside them.
2. Semantic (``search.semantic``), on a pool thread at the same time: the query embedded by the
   worker's model, the nearest rows within the filters and window by the cheapest strategy that
   loses none (Chroma top-N, the local vector copy, exact by id, or a Chroma ``where``).
3. Linked evidence (``search.links``): an observation is recorded under a user prompt (same
   session and ``prompt_number``); when prompts are searched without observations, the
   observations that match vouch for the prompts they talk about, each vote spread by how
   specific its link is and which of the session's prompts its text is closest to. Prompts are
   also ranked in the context of their neighbouring prompts (``search.context``), a list of its own,
   when prompts alone are searched.
4. Fusion (``search.fusion``), or for date order the newest/oldest matches (SQLite's own date order
   of the lexical matches, merged with the semantic candidates that are real matches); then the
   page, hydrated with one ``IN`` query per kind in that order (``search.hydrate``).
If Chroma is down, slow, erroring or empty, the lexical answer is returned as
``lexical_fallback`` with the reason; nothing raises to the caller for a bad query string.
The lookups (find_by_*, get, timeline, recent context, similar) are in ``search.lookups``.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.embedding import Embedder
from memsync.config.settings import Settings
from memsync.search import fts, hydrate, links
from memsync.search.fusion import Ranked, Weights, fuse
from memsync.search.hydrate import PageEntry
from memsync.search.lexical import LexicalSide
from memsync.search.lookups import Lookups
from memsync.search.models import (
    Filters,
    Format,
    Key,
    Mode,
    Order,
    Response,
    SearchError,
    Window,
    make_window,
)
from memsync.search.rerank import rerank
from memsync.search.semantic import EVIDENCE_KINDS, SemanticAnswer, SemanticSide
from memsync.search.sql import QueryTimeout, SourceRows
from memsync.search.threads import one_blas_thread
from memsync.search.timing import elapsed_ms
from memsync.search.vectorcopy import VectorCopy
from memsync.search.vectorstore import RowHit, VectorStore, VectorUnavailable, probe

DATE_ORDER_MIN_SIMILARITY = 0.35  # a semantic candidate counts as a match for date order above this


@dataclass
class _Gathered:
    """What the two sides found for one search."""

    lexical: dict[Kind, list[int]] = field(default_factory=dict)
    semantic: list[RowHit] = field(default_factory=list)
    evidence_semantic: list[list[Key]] = field(default_factory=list)  # evidence rows per kind, best first
    evidence_lexical: list[list[Key]] = field(default_factory=list)
    linked_semantic: list[links.Vote] = field(default_factory=list)  # the prompts they vouch for
    linked_lexical: list[links.Vote] = field(default_factory=list)
    similarity: dict[Key, RowHit] = field(default_factory=dict)
    context: list[int] = field(default_factory=list)  # prompts ranked in their neighbours' context
    copy: VectorCopy | None = None  # the vector copy the semantic side read (None: priors only)


class Searcher(Lookups):
    """The search library's entry point; one per process (thread-safe), cheap to keep open."""

    def __init__(self, settings: Settings, embedder: Embedder | None = None, weights: Weights | None = None) -> None:
        self.settings = settings
        self.weights = weights or Weights()
        self._embedder = embedder
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=6, thread_name_prefix="memsync-search")
        self._vector: VectorStore | None = None

    @property
    def vector(self) -> VectorStore:
        """The vector store (it embeds queries with the active generation's model, loaded on first use)."""
        if self._vector is None:
            self._vector = VectorStore(self.settings, self._embedder)
        return self._vector

    def close(self) -> None:
        """Release the threads held by the engine and its vector store."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._vector is not None:
            self._vector.close()

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
        lexical = LexicalSide(self.settings, rows, query, self._pool, use_text_index=mode is not Mode.SEMANTIC)
        try:
            t0 = time.perf_counter()
            if not fts.tokens(query):
                return self._listing(rows, query, kinds, filters, window, limit, offset, order, format, timings)
            need = offset + limit
            depth = max(self.settings.candidates, need)
            got = _Gathered()
            answered, notes = mode, []
            # The two sides run at once: the semantic side (embedding, Chroma, its own SQLite
            # connection) on a pool thread, the lexical side here; both mostly wait outside the GIL.
            # Linked evidence (observations vouching for the prompt they were recorded under) only
            # when prompts are searched without observations: with both, each observation is a
            # result of its own, and boosting its prompt too would count the same evidence twice
            # (prompts then crowded observations out of mixed results).
            # Linked evidence and the context list only reorder by relevance: date order skips them.
            ranked_hybrid = mode is Mode.HYBRID and order is Order.RELEVANCE
            linked = ranked_hybrid and Kind.PROMPT in kinds and Kind.OBSERVATION not in kinds
            # The context list is a second dense list of prompts only: in a search of several kinds
            # it would count prompts' semantic evidence twice and crowd the other kinds out.
            context = ranked_hybrid and set(kinds) == {Kind.PROMPT}
            sem_future: concurrent.futures.Future[SemanticAnswer] | None = None
            if mode is not Mode.LEXICAL:
                sem_future = self._pool.submit(self._semantic, query, kinds, filters, window, need, depth, linked,
                                               context)
            if mode is not Mode.SEMANTIC:
                try:
                    self._lexical(rows, lexical, kinds, filters, window, depth, linked, got)
                except QueryTimeout as exc:  # keep what was gathered; say that the rest is missing
                    notes.append(f"full-text search incomplete: {exc}")
            if lexical.note:  # the text index could not be read: FTS5 ranked alone
                notes.append(lexical.note)
            timings["lexical"] = elapsed_ms(t0)
            # How many matches the window hides depends on the lexical side only: counted while
            # the semantic side (the longer one) is still at work.
            t3 = time.perf_counter()
            try:
                excluded = lexical.excluded(kinds, filters, window) if window.source == "window" else 0
            except QueryTimeout:
                excluded = 0
            timings["window_count"] = elapsed_ms(t3)
            if sem_future is not None:
                try:
                    sem = sem_future.result()
                    got.semantic, got.similarity, got.context = sem.hits, sem.similarity, sem.context
                    got.copy = sem.copy
                    if sem.note:
                        notes.append(sem.note)
                    got.evidence_semantic = [[key for key in sem.evidence if key[0] is k] for k in EVIDENCE_KINDS]
                    timings.update(sem.timings)
                except VectorUnavailable as exc:
                    if mode is Mode.SEMANTIC:
                        return Response(Mode.LEXICAL_FALLBACK, [], window, reason=str(exc), query=query,
                                        timings_ms=timings)
                    answered = Mode.LEXICAL_FALLBACK
                    notes.insert(0, str(exc))
                except QueryTimeout as exc:
                    notes.append(f"semantic filtering incomplete: {exc}")
            if linked:
                t1 = time.perf_counter()
                self._link(rows, filters, window, got, self.weights.k)
                timings["linked"] = elapsed_ms(t1)
            t2 = time.perf_counter()
            if order is Order.RELEVANCE:
                fused = self._fuse(got)
                if self.settings.rerank_provider != "none":
                    fused = rerank(self.settings, rows, query, fused, notes)
                total = len(fused)
                page = fused[offset:need]
            else:
                dated = self._date_order(rows, lexical, kinds, filters, window, got, need, order)
                total = len(dated)
                page = dated[offset:need]
            timings["fuse"] = elapsed_ms(t2)
            t4 = time.perf_counter()
            results = hydrate.results(rows, page, got.similarity, format)
            timings["hydrate"] = elapsed_ms(t4)
            timings["total"] = elapsed_ms(t0)
            if own := lexical.own_index_note():  # e.g. prompts: claude-mem dropped user_prompts_fts
                notes.append(own)
            return Response(answered, results, window, excluded, "; ".join(notes) or None, total, timings, query)
        except QueryTimeout as exc:
            raise SearchError(f"the database did not answer in time ({exc}); try again") from exc
        finally:
            lexical.close()
            rows.close()

    def _semantic(self, query: str, kinds: Sequence[Kind], filters: Filters, window: Window, need: int, depth: int,
                  linked: bool, context: bool) -> SemanticAnswer:
        """The semantic side (run on a pool thread: loading the model on first use waits there too)."""
        if self._vector is None:  # no server recorded, or a refused port: answer before loading the model
            probe(self.settings)
        return SemanticSide(self.settings, self.vector).search(query, kinds, filters, window, need, depth, linked,
                                                               context)

    @staticmethod
    def _lexical(rows: SourceRows, lexical: LexicalSide, kinds: Sequence[Kind], filters: Filters, window: Window,
                 depth: int, linked: bool, got: _Gathered) -> None:
        """The lexical rankings, and with ``linked`` the evidence rows (``EVIDENCE_KINDS``) that match
        (searched with the project and dates only: they are evidence, not results)."""
        tasks = [(k, filters) for k in kinds]
        evidence = [k for k in EVIDENCE_KINDS if k not in kinds] if linked else []
        evidence_filters = Filters(project=filters.project, platform=filters.platform, date_from=filters.date_from,
                                   date_to=filters.date_to)
        tasks.extend((k, evidence_filters) for k in evidence)
        ranked = lexical.rank(tasks, window, depth)
        got.lexical = {k: ranked[k] for k in kinds}
        got.evidence_lexical = [[(k, i) for i in ranked[k]] for k in evidence]

    @staticmethod
    def _link(rows: SourceRows, filters: Filters, window: Window, got: _Gathered, k: int) -> None:
        """The prompts the evidence rows of both sides vouch for (``search.links``); the vector copy
        the semantic side read tells which prompt an observation talks about."""
        with one_blas_thread():
            got.linked_lexical, got.linked_semantic = links.votes(
                rows, got.copy, [got.evidence_lexical, got.evidence_semantic], filters, window, k)

    def _fuse(self, got: _Gathered) -> list[PageEntry]:
        """Both sides' rankings and the linked evidence, fused (weighted RRF), best first."""
        w = self.weights
        lists = [Ranked([(k, i) for i in ids], w.lexical, False) for k, ids in got.lexical.items()]
        lists.append(Ranked([(h.kind, h.id) for h in got.semantic], w.semantic, True))
        lists.append(Ranked([(Kind.PROMPT, i) for i in got.context], w.context, True))
        for votes, weight, sem in ((got.linked_semantic, w.linked_semantic, True),
                                   (got.linked_lexical, w.linked_lexical, False)):
            lists.append(Ranked([(Kind.PROMPT, v.prompt) for v in votes], weight, sem,
                                [v.rank for v in votes], [v.share for v in votes]))
        out: list[PageEntry] = []
        for key, score, sem, lex in fuse(lists, w.k):
            assert isinstance(key, tuple)
            out.append(PageEntry((Kind(key[0]), int(key[1])), score, sem, lex))
        return out

    @staticmethod
    def _date_order(rows: SourceRows, lexical: LexicalSide, kinds: Sequence[Kind], filters: Filters,
                    window: Window, got: _Gathered, need: int, order: Order) -> list[PageEntry]:
        """The newest (oldest) matches: SQLite's own date-ordered lexical matches, merged with the
        semantic candidates that are real matches, by date."""
        dated: dict[Key, tuple[int, bool, bool]] = {}
        for key, epoch in lexical.dated(kinds, filters, window, need, order):
            dated[key] = (epoch, False, True)
        sem = [h for h in got.semantic if h.similarity >= DATE_ORDER_MIN_SIMILARITY]
        for kind in kinds:
            ids = [h.id for h in sem if h.kind is kind]
            for i, epoch in rows.epochs(kind, ids).items():
                prev = dated.get((kind, i))
                dated[(kind, i)] = (epoch, True, prev is not None)
        keys = sorted(dated, key=lambda k: (dated[k][0], k[1]), reverse=order is Order.NEWEST)
        return [PageEntry(k, got.similarity[k].similarity if k in got.similarity else 1.0, dated[k][1], dated[k][2])
                for k in keys]

    @staticmethod
    def _listing(rows: SourceRows, query: str, kinds: Sequence[Kind], filters: Filters, window: Window,
                 limit: int, offset: int, order: Order, format: Format, timings: dict[str, float]) -> Response:
        """No words in the query: the newest (or oldest) rows within the filters."""
        t = time.perf_counter()
        newest = order is not Order.OLDEST
        dated: list[tuple[int, Key]] = []
        for kind in kinds:
            dated.extend((e, (kind, i)) for i, e in rows.recent(kind, filters, window, offset + limit, 0, newest))
        dated.sort(key=lambda x: (x[0], x[1][1]), reverse=newest)
        page = [PageEntry(k, 1.0, False, True) for _, k in dated[offset:offset + limit]]
        results = hydrate.results(rows, page, {}, format)
        timings["total"] = elapsed_ms(t)
        total = sum(rows.count(kind, filters, window) for kind in kinds)
        return Response(Mode.LEXICAL, results, window, 0, "no words in the query: newest records listed",
                        total, timings, query)
