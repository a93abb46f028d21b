"""The search pipeline: both sides at once, linked evidence, fusion, date order, the page, hydration.

How a query is answered (``Searcher.search``), planned once from its request (``search.plan``):
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
from dataclasses import dataclass, field

from memsync.config.claude_mem.schema import Kind
from memsync.config.formats.database_owner import claim
from memsync.config.settings import Settings
from memsync.embedding import Embedder
from memsync.search import fts, hydrate, links, relevance
from memsync.search.fusion import Ranked, Weights, fuse
from memsync.search.hydrate import PageEntry
from memsync.search.lexical import LexicalSide
from memsync.search.lookups import Lookups
from memsync.search.models import Key, Mode, Order, Response, SearchError
from memsync.search.plan import Plan
from memsync.search.request import SearchRequest
from memsync.search.rerank import rerank
from memsync.search.semantic import SemanticAnswer, SemanticSide
from memsync.search.sql import QueryTimeout, SourceRows
from memsync.search.stopwatch import Stopwatch
from memsync.search.threads import one_blas_thread
from memsync.search.vectorstore import VectorStore, VectorUnavailable, probe

DATE_ORDER_MIN_SIMILARITY = 0.35  # a semantic candidate counts as a match for date order above this


@dataclass(frozen=True, slots=True)
class LexicalAnswer:
    """What the lexical side found: each searched kind's rows best first, the evidence rows per
    evidence kind (linked evidence), and what the response's reason should say."""

    ranked: dict[Kind, list[int]] = field(default_factory=dict)
    evidence: list[list[Key]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class LinkedAnswer:
    """The prompts the evidence rows of each side vouch for (``search.links``), strongest first."""

    lexical: list[links.Vote] = field(default_factory=list)
    semantic: list[links.Vote] = field(default_factory=list)


class Searcher(Lookups):
    """The search library's entry point; one per process (thread-safe), cheap to keep open."""

    def __init__(self, settings: Settings, embedder: Embedder | None = None, weights: Weights | None = None) -> None:
        """DatabaseMismatch when the data directory belongs to another database: its store and
        indexes would answer for that one."""
        claim(settings)
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

    def search(self, request: SearchRequest) -> Response:
        """Hybrid search; see the module docstring. ``mode`` LEXICAL or SEMANTIC uses one side only."""
        plan, mode = Plan.of(request, self.settings), request.mode
        rows = self._rows()
        lexical = LexicalSide(self.settings, rows, plan.query, self._pool, use_text_index=mode is not Mode.SEMANTIC)
        try:
            if not fts.tokens(plan.query):
                return _listing(rows, plan)
            watch = Stopwatch()
            with watch.stage("lexical"):
                # The two sides run at once: the semantic side (embedding, Chroma, its own SQLite
                # connection) on a pool thread, the lexical side here; both mostly wait outside the GIL.
                pending = self._pool.submit(self._semantic, plan) if mode is not Mode.LEXICAL else None
                lex = _lexical(lexical, plan)
            with watch.stage("window_count"):  # the lexical side only: counted while the semantic side works
                excluded = _excluded(lexical, plan)
            sem = pending.result() if pending is not None else SemanticAnswer()
            if sem.unavailable and mode is Mode.SEMANTIC:
                return Response(Mode.LEXICAL_FALLBACK, [], plan.window, reason=sem.unavailable, query=plan.query,
                                timings_ms=watch.timings)
            watch.timings.update(sem.timings)
            linked = LinkedAnswer()
            if plan.linked:
                with watch.stage("linked"):
                    linked = self._link(rows, plan, lex, sem)
            notes = [*([sem.unavailable] if sem.unavailable else []), *lex.notes, *([sem.note] if sem.note else []),
                     *([sem.coverage.note(mode is not Mode.SEMANTIC)] if sem.coverage else [])]
            with watch.stage("fuse"):
                by_relevance = request.order is Order.RELEVANCE
                entries = self._fuse(lex, sem, linked) if by_relevance else _date_order(rows, lexical, plan, sem)
            ranked, below = False, 0
            if by_relevance:
                with watch.stage("relevance"):
                    # The order changes only for prompt searches with words in them, the shape the
                    # model was measured on (LoCoMo's questions): on the multilingual set's coding
                    # memory, asked over every kind, re-ranking cost hybrid recall@10 0.969 -> 0.956 in
                    # English and more in Chinese, Japanese and Korean (docs/benchmarks.md); a search
                    # by meaning alone keeps the dense order it asked for. Elsewhere the fused order
                    # stays and each result only gains its confidence.
                    reorder = set(plan.kinds) == {Kind.PROMPT} and mode is not Mode.SEMANTIC
                    try:
                        entries, ranked = self._rank(rows, entries, lex, sem, linked, reorder), True
                    except (QueryTimeout, IndexError, ValueError, OSError) as exc:
                        # A slow database, a vector copy damaged in place, an unreadable model file:
                        # the fused order answers, and says so.
                        notes.append(f"relevance model skipped, fused order kept: {exc}")
                if self.settings.rerank_provider != "none":
                    with watch.stage("rerank"):
                        entries = rerank(self.settings, rows, plan.query, entries, notes)
            # The cutoff needs a calibrated chance: not a search by meaning alone (read without the
            # lexical lists the model was fitted with) nor a provider without a model of its own
            # (openai: an order); a lexical answer is read by the lexical model, calibrated.
            calibrated = mode is not Mode.SEMANTIC and (
                bool(sem.unavailable) or not sem.hits or self.settings.embedding_provider in relevance.CALIBRATED)
            cutoff = self.settings.min_confidence if ranked and calibrated and not request.show_all else None
            cutoff = cutoff or None  # 0: no cutoff, every match listed
            if cutoff is not None:
                # One threshold for lists (the injection decision has its own): a row past the depth
                # the model reads has no confidence, and is left out with those below it.
                kept = [e for e in entries if e.confidence is not None and e.confidence >= cutoff]
                below, entries = len(entries) - len(kept), kept
            with watch.stage("hydrate"):
                results = hydrate.results(rows, entries[request.offset:plan.need], sem.similarity, request.format,
                                          fused=by_relevance)
            watch.total()
            if index := lexical.index_note():  # e.g. prompts (claude-mem dropped user_prompts_fts), CJK words
                notes.append(index)
            return Response(Mode.LEXICAL_FALLBACK if sem.unavailable else mode, results, plan.window, excluded,
                            "; ".join(notes) or None, len(entries), watch.timings, plan.query, sem.coverage,
                            below, cutoff)
        except QueryTimeout as exc:
            raise SearchError(f"the database did not answer in time ({exc}); try again") from exc
        finally:
            lexical.close()
            rows.close()

    def _semantic(self, plan: Plan) -> SemanticAnswer:
        """The semantic side (run on a pool thread: loading the model on first use waits there too);
        when the store cannot answer, or the database is too slow, an empty answer saying why."""
        try:
            if self._vector is None:  # no server recorded, or a refused port: answer before loading the model
                probe(self.settings)
            return SemanticSide(self.settings, self.vector).search(plan)
        except VectorUnavailable as exc:
            return SemanticAnswer(unavailable=str(exc))
        except QueryTimeout as exc:
            return SemanticAnswer(note=f"semantic filtering incomplete: {exc}")

    def _link(self, rows: SourceRows, plan: Plan, lex: LexicalAnswer, sem: SemanticAnswer) -> LinkedAnswer:
        """The prompts the evidence rows of both sides vouch for (``search.links``); the vector copy
        the semantic side read tells which prompt an observation talks about."""
        semantic = [[key for key in sem.evidence if key[0] is k] for k in plan.evidence_kinds]
        with one_blas_thread():
            lexical, semantic_votes = links.votes(rows, sem.copy, [lex.evidence, semantic], plan.scope,
                                                  self.weights.k)
        return LinkedAnswer(lexical, semantic_votes)

    def _fuse(self, lex: LexicalAnswer, sem: SemanticAnswer, linked: LinkedAnswer) -> list[PageEntry]:
        """Both sides' rankings and the linked evidence, fused (weighted RRF), best first."""
        w = self.weights
        lists = [Ranked([(k, i) for i in ids], w.lexical, False) for k, ids in lex.ranked.items()]
        lists.append(Ranked([(h.kind, h.id) for h in sem.hits], w.semantic, True))
        lists.append(Ranked([(Kind.PROMPT, i) for i in sem.context], w.context, True))
        for votes, weight, semantic in ((linked.semantic, w.linked_semantic, True),
                                        (linked.lexical, w.linked_lexical, False)):
            lists.append(Ranked([(Kind.PROMPT, v.prompt) for v in votes], weight, semantic,
                                [v.rank for v in votes], [v.share for v in votes]))
        return [PageEntry(key, score, sem_found, lex_found) for key, score, sem_found, lex_found in fuse(lists, w.k)]


    def _rank(self, rows: SourceRows, entries: list[PageEntry], lex: LexicalAnswer, sem: SemanticAnswer,
              linked: LinkedAnswer, reorder: bool = True) -> list[PageEntry]:
        """The fused top ``relevance.DEPTH`` re-ranked by the relevance model (``reorder`` False: in
        fused order), each with its confidence (``search.relevance``): the provider's model, or the
        lexical one when the dense side did not answer."""
        ing = self._ingredients(rows, entries[:relevance.DEPTH], lex, sem, linked)
        dense = not sem.unavailable and bool(sem.hits)
        model = relevance.load(self.settings.embedding_provider if dense else relevance.LEXICAL)
        return relevance.rank(entries, ing, model, reorder)

    def _ingredients(self, rows: SourceRows, head: list[PageEntry], lex: LexicalAnswer, sem: SemanticAnswer,
                     linked: LinkedAnswer) -> relevance.Matrix:
        """What the relevance model reads of the candidates ``head`` (``relevance.ingredients``)."""
        keys = [e.key for e in head]
        lists: dict[str, dict[Key, int]] = {
            "lexical": {(k, i): r for k, ids in lex.ranked.items() for r, i in enumerate(ids)},
            "semantic": {},
            "context": {(Kind.PROMPT, i): r for r, i in enumerate(sem.context)},
        }
        for h in sem.hits:
            ranks = lists["semantic"]
            ranks.setdefault((h.kind, h.id), len(ranks))
        shares: dict[str, dict[Key, float]] = {}
        for name, votes in (("linked_semantic", linked.semantic), ("linked_lexical", linked.lexical)):
            lists[name], shares[name] = {}, {}
            for v in votes:  # strongest first: the first vote of a prompt is the one fusion counted
                lists[name].setdefault((Kind.PROMPT, v.prompt), v.rank)
                shares[name].setdefault((Kind.PROMPT, v.prompt), v.share)
        similarity = {key: hit.similarity for key, hit in sem.similarity.items()}
        floor = min((h.similarity for h in sem.hits), default=0.0)
        missing = [k for k in keys if k not in similarity]
        if missing and sem.copy is not None and sem.query is not None:
            # Rows only the lexical side found: their cosine from the vector copy the semantic side
            # opened (prompt searches with a complete copy; elsewhere the floor, as in the fit).
            for key, vecs in sem.copy.row_vectors(missing).items():
                similarity[key] = float((vecs @ sem.query).max())
        return relevance.ingredients(keys, lists, shares, similarity, floor, rows.positions(keys))


def _lexical(side: LexicalSide, plan: Plan) -> LexicalAnswer:
    """The lexical rankings, and with linked evidence the evidence rows that match (searched with
    the project, platform and dates only: they are evidence, not results). A database too slow
    keeps what was gathered and says that the rest is missing."""
    ranked: dict[Kind, list[int]] = {}
    evidence: list[list[Key]] = []
    notes: list[str] = []
    if plan.request.mode is not Mode.SEMANTIC:
        f = plan.filters
        tasks = [(k, f) for k in plan.kinds]
        tasks.extend((k, f.common()) for k in plan.evidence_kinds)
        try:
            found = side.rank(tasks, plan.window, plan.depth)
        except QueryTimeout as exc:
            notes.append(f"full-text search incomplete: {exc}")
        else:
            ranked = {k: found[k] for k in plan.kinds}
            evidence = [[(k, i) for i in found[k]] for k in plan.evidence_kinds]
    if side.note:  # the text index could not be read: FTS5 ranked alone
        notes.append(side.note)
    return LexicalAnswer(ranked, evidence, notes)


def _excluded(side: LexicalSide, plan: Plan) -> int:
    """How many matches the recency window hides (0 for a date range or all time)."""
    try:
        return side.excluded(plan.kinds, plan.scope) if plan.window.source == "window" else 0
    except QueryTimeout:
        return 0


def _date_order(rows: SourceRows, side: LexicalSide, plan: Plan, sem: SemanticAnswer) -> list[PageEntry]:
    """The newest (oldest) matches: SQLite's own date-ordered lexical matches, merged with the
    semantic candidates that are real matches, by date."""
    order = plan.request.order
    dated: dict[Key, tuple[int, bool, bool]] = {}
    for key, epoch in side.dated(plan.kinds, plan.scope, plan.need, order):
        dated[key] = (epoch, False, True)
    matches = [h for h in sem.hits if h.similarity >= DATE_ORDER_MIN_SIMILARITY]
    for kind in plan.kinds:
        ids = [h.id for h in matches if h.kind is kind]
        for i, epoch in rows.epochs(kind, ids).items():
            prev = dated.get((kind, i))
            dated[(kind, i)] = (epoch, True, prev is not None)
    keys = sorted(dated, key=lambda k: (dated[k][0], k[1]), reverse=order is Order.NEWEST)
    return [PageEntry(k, sem.similarity[k].similarity if k in sem.similarity else 1.0, dated[k][1], dated[k][2])
            for k in keys]


def _listing(rows: SourceRows, plan: Plan) -> Response:
    """No words in the query: the newest (or oldest) rows within the filters."""
    watch, request = Stopwatch(), plan.request
    newest = request.order is not Order.OLDEST
    dated: list[tuple[int, Key]] = []
    for kind in plan.kinds:
        dated.extend((e, (kind, i)) for i, e in rows.recent(kind, plan.scope, plan.need, 0, newest))
    dated.sort(key=lambda x: (x[0], x[1][1]), reverse=newest)
    page = [PageEntry(k, 1.0, False, True) for _, k in dated[request.offset:plan.need]]
    results = hydrate.results(rows, page, {}, request.format, fused=False)
    watch.total()
    total = sum(rows.count(kind, plan.filters, plan.window) for kind in plan.kinds)
    return Response(Mode.LEXICAL, results, plan.window, 0, "no words in the query: newest records listed",
                    total, watch.timings, plan.query)
