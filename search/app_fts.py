"""BM25 over the app's own FTS5 tables, with every filter and the window in the same statement.

So nothing inside the filters is cut by rows outside them. Query words are matched in the forms
the table holds (its fts5vocab word list, read through an in-memory connection: the agent's
database gets no table, not even a temporary one), common words are left out when rarer ones
remain, and BM25 ranks at most the newest RANK_CAP matches: the cost of a query stays bounded on
large tables. Which index answers a search is decided in ``search.lexical``.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from memsync.config.claude_mem.schema import FTS_TABLES, TABLES, Kind
from memsync.config.errors import SourceUnavailable
from memsync.search import fts
from memsync.search.models import Order, Scope
from memsync.search.sql import ALIAS, SourceRows

# A word in more than half the rows has no BM25 weight (FTS5 clamps its idf to ~0), so leaving it
# out changes no ranking while sparing the scoring of its long posting list.
COMMON_FRACTION = 0.5
MIN_TERMS = 2
RANK_CAP = 1000  # BM25 ranks at most the newest this many matches per kind (see _rank_bound)
FORMS_TTL_S = 60.0
_forms_cache: dict[tuple[str, Kind, str], tuple[tuple[tuple[str, ...], int], float]] = {}
_SORT = {Order.RELEVANCE: "f.rank", Order.NEWEST: f"{ALIAS}.created_at_epoch DESC, {ALIAS}.id DESC",
         Order.OLDEST: f"{ALIAS}.created_at_epoch ASC, {ALIAS}.id ASC"}


class AppFts:
    """The app's FTS5 tables, read over one connection (plus its word-list connection)."""

    def __init__(self, rows: SourceRows) -> None:
        self.rows = rows
        self._vocab_conn: sqlite3.Connection | None = None

    def close(self) -> None:
        """Close the word-list connection (the rows' connection belongs to the caller)."""
        if self._vocab_conn is not None:
            self._vocab_conn.close()
            self._vocab_conn = None

    def _vocab(self) -> sqlite3.Connection:
        """An in-memory connection with the source attached read-only and fts5vocab tables over the
        app's FTS tables."""
        if self._vocab_conn is None:
            conn = sqlite3.connect("file::memory:", uri=True, check_same_thread=False)
            try:
                conn.execute("ATTACH ? AS src", (self.rows.uri,))
                for kind in Kind:
                    if self.rows.has_fts(kind):
                        table = FTS_TABLES[kind][0]
                        conn.execute(f"CREATE VIRTUAL TABLE temp.v_{kind.value} "
                                     f"USING fts5vocab('src', '{table}', 'row')")
            except sqlite3.Error as exc:
                conn.close()
                raise SourceUnavailable(f"reading the database's word list failed: {exc}") from exc
            self._vocab_conn = conn
        return self._vocab_conn

    def forms(self, kind: Kind, token: str) -> tuple[tuple[str, ...], int]:
        """How a query word is matched on ``kind``'s table, and how many rows hold the word itself
        (its document frequency): the word itself, plus its Porter stem as an FTS5
        prefix when that differs (``painting`` → ``"painting" OR "paint"*``). A prefix keeps one
        BM25 weight for all forms; listing the forms as separate terms gave rare forms a large
        weight and measured worse on LoCoMo (BM25 recall@10 0.582 vs 0.598). Cached for a minute."""
        key = (self.rows.uri, kind, token)
        now = time.monotonic()
        hit = _forms_cache.get(key)
        if hit is not None and now - hit[1] < FORMS_TTL_S:
            return hit[0]
        if len(_forms_cache) > 50_000:
            _forms_cache.clear()
        stem = fts.prefix_stem(token)
        try:
            row = self._vocab().execute(f"SELECT doc FROM v_{kind.value} WHERE term = ?", (token,)).fetchone()
        except sqlite3.Error as exc:
            raise SourceUnavailable(f"reading the database's word list failed: {exc}") from exc
        found: tuple[tuple[str, ...], int] = ((token, stem + "*") if stem else (token,), int(row[0]) if row else 0)
        _forms_cache[key] = (found, now)
        return found

    def expression(self, kind: Kind, text: str) -> str | None:
        """The MATCH expression for ``text`` on ``kind``'s table: each content word with its forms
        (see :meth:`forms`), OR-ed. Words in more than COMMON_FRACTION of the rows are left out
        when rarer ones remain: BM25 gives them almost no weight, yet scoring their long posting
        lists is most of the cost of a query."""
        words = fts.tokens(text)
        if not words:
            return None
        info = {w: self.forms(kind, w) for w in words}
        n = max(1, self.rows.max_id(kind))
        keep = [w for w in words if info[w][1] <= COMMON_FRACTION * n]
        if not keep:  # every word is in most rows: the rarest carry the query
            keep = sorted(words, key=lambda w: info[w][1])[:MIN_TERMS]
        return fts.expression_for([info[w][0] for w in keep])

    def ranked(self, kind: Kind, expr: str, scope: Scope, limit: int,
               order: Order = Order.RELEVANCE) -> list[tuple[int, float]]:
        """Rows of ``kind`` matching the MATCH expression within the scope: (id, bm25) with higher =
        better, best first (or newest/oldest first when ``order`` says so)."""
        if not self.rows.applicable(kind, scope.filters):
            return []
        table = FTS_TABLES[kind][0]
        window = scope.window
        cond, params = self.rows.where(kind, scope.filters, window)
        if scope.after_id:
            cond += " AND f.rowid > ?"
            params.append(scope.after_id)
        if window is not None and window.start_ms is not None:
            # Rows are appended in time order, so the window is (almost) an id range, and FTS5 skips
            # whole doclist segments for a rowid bound: ~5x less to score. Exact: the bound is the
            # smallest id of any row in the window.
            cond += " AND f.rowid >= ?"
            params.append(self.rows.first_id_since(kind, window.start_ms))
        if order is Order.RELEVANCE:
            bound = self._rank_bound(kind, expr, cond, params)
            if bound is not None:
                cond += " AND f.rowid >= ?"
                params.append(bound)
        if cond == "1" and order is Order.RELEVANCE:  # nothing to join for: FTS5 alone
            sql = f"SELECT f.rowid AS id, f.rank AS rank FROM {table} f WHERE {table} MATCH ? ORDER BY f.rank LIMIT ?"
            return [(int(r["id"]), -float(r["rank"])) for r in self.rows.query(sql, [expr, limit])]
        sql = (f"SELECT {ALIAS}.id AS id, f.rank AS rank FROM {table} f JOIN {TABLES[kind]} {ALIAS} "
               f"ON {ALIAS}.id = f.rowid WHERE {table} MATCH ? AND {cond} ORDER BY {_SORT[order]} LIMIT ?")
        return [(int(r["id"]), -float(r["rank"])) for r in self.rows.query(sql, [expr, *params, limit])]

    def _rank_bound(self, kind: Kind, expr: str, cond: str, params: list[Any]) -> int | None:
        """The rowid of the RANK_CAP-th newest match, when there are more matches than that.

        BM25 scores every matching row (about 2 us each), so a query whose every word is common
        would cost tens of ms per table at 100k rows. Ranking only the newest RANK_CAP matches
        (within the filters) bounds that; it changes nothing while a query matches fewer rows, which
        after dropping the common words (see ``expression``) is the usual case."""
        table = FTS_TABLES[kind][0]
        if cond == "1":
            sql = f"SELECT f.rowid FROM {table} f WHERE {table} MATCH ? ORDER BY f.rowid DESC LIMIT 1 OFFSET ?"
            row = self.rows.query(sql, [expr, RANK_CAP - 1])
        else:
            sql = (f"SELECT f.rowid FROM {table} f JOIN {TABLES[kind]} {ALIAS} ON {ALIAS}.id = f.rowid "
                   f"WHERE {table} MATCH ? AND {cond} ORDER BY f.rowid DESC LIMIT 1 OFFSET ?")
            row = self.rows.query(sql, [expr, *params, RANK_CAP - 1])
        return int(row[0][0]) if row else None

    def count(self, kind: Kind, expr: str, scope: Scope, cap: int) -> int:
        """How many rows match within the scope, up to ``cap``, e.g. outside the window; unranked,
        so cheap."""
        if not self.rows.applicable(kind, scope.filters):
            return 0
        table = FTS_TABLES[kind][0]
        cond, params = self.rows.where(kind, scope.filters, scope.window)
        if scope.after_id:
            cond += " AND f.rowid > ?"
            params.append(scope.after_id)
        sql = (f"SELECT count(*) FROM (SELECT 1 FROM {table} f JOIN {TABLES[kind]} {ALIAS} "
               f"ON {ALIAS}.id = f.rowid WHERE {table} MATCH ? AND {cond} LIMIT ?)")
        return int(self.rows.query(sql, [expr, *params, cap])[0][0])
