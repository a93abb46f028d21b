"""The lexical side of a search: BM25 rankings per kind, and the one place that decides which index
answers.

Per kind:
1. memsync's text index (tantivy, ``search.textindex``) when it holds the kind and can apply the
   filters (all but concepts and files): its ranking, plus the rows newer than its watermark (the
   tail, committed since the worker's last pass) from FTS5, interleaved by rank (``merge_tail``);
2. else FTS5 alone.
FTS5 is the app's table for the kind (``search.app_fts``) or memsync's own FTS index
(``search.lexical_index``): when the database has none (older files; and prompts since claude-mem
dropped ``user_prompts_fts`` after 13.25.3), and for a query with CJK words (the app's ``unicode61``
keeps a CJK run as one word; memsync's index cuts runs into bigrams, ``config.cjk``). The
response's reason names the kinds it answered and why; the same
choice answers the tail, date order (the newest/oldest matches) and the count of matches outside
the window. Every filter and the
window are applied inside the index's query, so nothing inside them is cut by rows outside them.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from memsync.config import cjk
from memsync.config.claude_mem.schema import FTS_TABLES, KINDS, Kind
from memsync.config.formats.text_index import TextIndexDamaged, text_columns
from memsync.config.kinds import plural
from memsync.config.settings import Settings
from memsync.search import fts
from memsync.search.app_fts import AppFts
from memsync.search.lexical_index import LexicalIndex
from memsync.search.models import Filters, Key, Order, Scope, Window
from memsync.search.sql import SourceRows
from memsync.search.textindex import TextIndex, forget, merge_tail

EXCLUDED_CAP = 100  # counting matches outside the window stops here (then: "at least")


class FtsSource(Protocol):
    """An FTS5 index of the agent's rows: the app's tables or memsync's own index."""

    def expression(self, kind: Kind, text: str) -> str | None:
        """The MATCH expression for ``text`` on ``kind``'s table, or None when it has no word."""

    def ranked(self, kind: Kind, expr: str, scope: Scope, limit: int,
               order: Order = Order.RELEVANCE) -> list[tuple[int, float]]:
        """(id, score) of the matches within the scope, best (or newest/oldest) first."""

    def count(self, kind: Kind, expr: str, scope: Scope, cap: int) -> int:
        """How many rows match within the scope, up to ``cap``."""


class _Connection:
    """The FTS5 side over one connection: per kind the source that answers, and the query's
    expression for it (built once)."""

    def __init__(self, settings: Settings, rows: SourceRows, text: str, own_kinds: set[Kind]) -> None:
        self.settings, self.rows, self.text = settings, rows, text
        self.own_kinds = own_kinds  # shared by the side's connections: the kinds memsync's index answered
        self._app: AppFts | None = None
        self._own: LexicalIndex | None = None
        self._expressions: dict[Kind, str | None] = {}
        # The app's tables tokenize with unicode61, which keeps a CJK run as one word: a CJK word
        # inside a run is found only by memsync's own index, which cuts runs (config.cjk).
        self.cjk = cjk.has_cjk(text)

    def close(self) -> None:
        if self._app is not None:
            self._app.close()
        if self._own is not None:
            self._own.close()

    def fts(self, kind: Kind) -> FtsSource:
        """The app's FTS5 table for ``kind``, or memsync's own index (brought up to date) when the
        database has none or the query has CJK words (see the module docstring)."""
        if self.rows.has_fts(kind) and not self.cjk:
            if self._app is None:
                self._app = AppFts(self.rows)
            return self._app
        self.own_kinds.add(kind)
        if self._own is None:
            self._own = LexicalIndex.refreshed(self.settings, self.rows)
        return self._own

    def expression(self, kind: Kind) -> str | None:
        if kind not in self._expressions:
            self._expressions[kind] = self.fts(kind).expression(kind, self.text)
        return self._expressions[kind]

    def ranked(self, kind: Kind, scope: Scope, limit: int, order: Order = Order.RELEVANCE) -> list[int]:
        expr = self.expression(kind)
        if not expr:
            return []
        ids = [i for i, _ in self.fts(kind).ranked(kind, expr, scope, limit, order)]
        return self.strong(kind, ids) if order is Order.RELEVANCE else ids

    def strong(self, kind: Kind, ids: list[int]) -> list[int]:
        """``ids`` without the rows holding only words of the query common in English, as the text
        index leaves them out (``TextIndex.weak``), read from the rows' text."""
        rare = fts.rarer(fts.tokens(self.text))
        if not rare or not ids:
            return ids
        texts = self.rows.texts(kind, ids, text_columns(kind))
        return [i for i in ids if fts.holds(texts.get(i, ""), rare)]

    def count(self, kind: Kind, scope: Scope, cap: int) -> int:
        expr = self.expression(kind)
        return self.fts(kind).count(kind, expr, scope, cap) if expr else 0


class LexicalSide:
    """The lexical side of one search (one query text); see the module docstring."""

    def __init__(self, settings: Settings, rows: SourceRows, text: str, pool: concurrent.futures.Executor,
                 use_text_index: bool = True) -> None:
        self.settings = settings
        self.text = text
        self._pool = pool
        self._own_kinds: set[Kind] = set()
        self._indexed_kinds: set[Kind] = set()  # the kinds the text index ranked
        self._main = _Connection(settings, rows, text, self._own_kinds)
        self._use_text_index = settings.text_index and use_text_index
        self._feedback = settings.lexical_feedback
        self._index: TextIndex | None = None
        self._index_opened = False
        self.note: str | None = None  # for the response's reason: FTS5 ranked in the text index's place

    def close(self) -> None:
        """Release what the side opened (the rows' connection belongs to the caller)."""
        self._main.close()

    @property
    def index(self) -> TextIndex | None:
        """memsync's text index, when there is one for this database and this search may use it
        (opened on first use: a query without words needs none)."""
        if not self._index_opened:
            if self._use_text_index:
                self._index, damaged = TextIndex.open_checked(self.settings)
                if damaged:
                    self._unreadable(damaged)
            self._index_opened = True
        return self._index

    def _unreadable(self, why: str, opened: bool = False) -> None:
        """The text index cannot be read: FTS5 answers this search alone, and its reason says so
        (the worker rebuilds the index, ``worker.stores.textsync``). ``opened``: it failed after it
        opened (a damaged segment), so later searches skip it too until it is rebuilt."""
        if opened:
            forget(self.settings, why)
        self._index = None
        self.note = f"lexical: FTS5 (text index unreadable, rebuilding: {why})"

    def index_note(self) -> str | None:
        """For the response's reason: which index answered when it was not the usual one. For a
        query with CJK words, the indexes that cut them into bigrams (the text index and memsync's
        own FTS index, never the app's tables); otherwise the kinds memsync's own FTS index answered
        because the database has no FTS5 table for them. None when there is nothing to say."""
        own = [k for k in KINDS if k in self._own_kinds]
        if self._main.cjk:
            indexed = [k for k in KINDS if k in self._indexed_kinds]
            parts = [f"{name} for {', '.join(plural(k) for k in kinds)}" for name, kinds in
                     (("memsync's text index", indexed), ("memsync's own FTS index", own)) if kinds]
            return (f"lexical: CJK words as bigrams, from {' and '.join(parts)} (FTS5's unicode61 tokenizer "
                    "keeps a CJK run as one word)") if parts else None
        if not own:
            return None
        return (f"lexical: memsync's own FTS index for {', '.join(plural(k) for k in own)} "
                f"(the database has no {', '.join(FTS_TABLES[k][0] for k in own)})")

    def _watermark(self, kind: Kind, filters: Filters) -> int | None:
        """The text index's watermark for ``kind`` when it can answer this search, else None."""
        index = self.index
        return index.watermark(kind) if index is not None and index.supports(filters) else None

    def rank(self, tasks: Sequence[tuple[Kind, Filters]], window: Window, depth: int) -> dict[Kind, list[int]]:
        """Each task's kind ranked within its filters and the window, best first, ``depth`` deep."""
        # One table per thread (each with its own connection; SQLite runs outside the GIL): the
        # first here, the others on the pool.
        here, rest = list(tasks[:1]), list(tasks[1:])
        if all(self._watermark(k, f) is not None for k, f in tasks):
            # The text index answers in well under a millisecond per kind: a thread and a connection
            # per kind would cost more than they save.
            here, rest = list(tasks), []
        futures = [self._pool.submit(self._rank_on_own_connection, k, Scope(f, window), depth) for k, f in rest]
        results = {k: self._rank_one(self._main, k, Scope(f, window), depth) for k, f in here}
        for (kind, _), future in zip(rest, futures, strict=True):
            results[kind] = future.result()
        return results

    def _rank_on_own_connection(self, kind: Kind, scope: Scope, depth: int) -> list[int]:
        rows = SourceRows.open(self.settings)
        conn = _Connection(self.settings, rows, self.text, self._own_kinds)
        try:
            return self._rank_one(conn, kind, scope, depth)
        finally:
            conn.close()
            rows.close()

    def _rank_one(self, conn: _Connection, kind: Kind, scope: Scope, depth: int) -> list[int]:
        """One kind's ranking: the text index for the rows it holds plus FTS5 for the newer ones,
        or FTS5 alone."""
        if not conn.rows.applicable(kind, scope.filters):
            return []
        index, mark = self.index, self._watermark(kind, scope.filters)
        if index is None or mark is None:
            return conn.ranked(kind, scope, depth)
        try:
            if self._feedback:
                columns = text_columns(kind)
                ranked = [i for i, _ in index.expanded(kind, self.text, scope, depth,
                                                       lambda ids: conn.rows.texts(kind, ids, columns))]
            else:
                ranked = [i for i, _ in index.search(kind, self.text, scope, depth)]
                weak = index.weak(kind, self.text, ranked)
                ranked = [i for i in ranked if i not in weak]
        except TextIndexDamaged as exc:  # a damaged segment: tantivy failed or panicked reading it
            self._unreadable(str(exc), opened=True)
            return conn.ranked(kind, scope, depth)
        self._indexed_kinds.add(kind)
        tail = conn.ranked(kind, replace(scope, after_id=mark), depth) if conn.rows.max_id(kind) > mark else []
        return merge_tail(ranked, tail, depth)

    def dated(self, kinds: Sequence[Kind], scope: Scope, limit: int, order: Order) -> list[tuple[Key, int]]:
        """The newest (``Order.NEWEST``) or oldest matches within the scope, up to ``limit`` per
        kind, with their dates, unsorted (FTS5's own date order: the text index ranks by BM25 only)."""
        out: list[tuple[Key, int]] = []
        for kind in kinds:
            ids = self._main.ranked(kind, scope, limit, order)
            out.extend(((kind, i), epoch) for i, epoch in self._main.rows.epochs(kind, ids).items())
        return out

    def excluded(self, kinds: Sequence[Kind], scope: Scope) -> int:
        """Rows that match the scope's filters but fall before its window, up to EXCLUDED_CAP."""
        filters, window = scope.filters, scope.window
        if window is None or window.start_ms is None:
            return 0
        outside = Scope(filters, Window(0, None, window.start_ms, "before_window"))
        n = 0
        index = self.index
        for kind in kinds:
            if not self._main.rows.applicable(kind, filters):
                continue
            mark = self._watermark(kind, filters)
            if index is not None and mark is not None:
                try:
                    n += index.count(kind, self.text, outside)
                except TextIndexDamaged as exc:
                    self._unreadable(str(exc), opened=True)
                    index, mark = None, None
                else:
                    if self._main.rows.max_id(kind) <= mark:
                        continue
            n += self._main.count(kind, replace(outside, after_id=mark or 0), EXCLUDED_CAP)
        return min(n, EXCLUDED_CAP)
