"""Everything the search asks SQLite: filters as SQL, lexical matches, hydration, timelines.

One read-only connection to the agent's database (``mode=ro``, ``query_only``), every value a
bound parameter (user text never becomes SQL), and a time limit on each statement through a
progress handler, so a pathological FTS query is interrupted instead of holding the caller.
Column names go through the era mapping of ``config.schema``: both schema eras are read.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from memsync.config.claude_mem.connection import fetch_all, open_source_db
from memsync.config.claude_mem.schema import (
    FTS_TABLES,
    SESSIONS_TABLE,
    SUMMARY_FIELDS,
    TABLES,
    Kind,
    SourceSchema,
    detect,
)
from memsync.config.claude_mem.values import LIST_COLUMNS, parse_list
from memsync.config.errors import SourceUnavailable
from memsync.search import fts
from memsync.search.models import Filters, Window

ALIAS = "t"
# A word in more than half the rows has no BM25 weight (FTS5 clamps its idf to ~0), so leaving it
# out changes no ranking while sparing the scoring of its long posting list.
COMMON_FRACTION = 0.5
MIN_TERMS = 2
RANK_CAP = 1000  # BM25 ranks at most the newest this many matches per kind (see _rank_bound)
_first_id_cache: dict[tuple[str, Kind, int], tuple[int, float]] = {}
_forms_cache: dict[tuple[str, Kind, str], tuple[tuple[tuple[str, ...], int], float]] = {}


class QueryTimeout(RuntimeError):
    """A statement ran past its time limit and was interrupted."""


class SourceRows:
    """Read-only access to the agent's database for one search call (or one server, shared)."""

    def __init__(self, path: Path, busy_timeout_ms: int = 5000, statement_ms: int = 2000) -> None:
        self.conn = open_source_db(path, busy_timeout_ms)
        # The same way of opening for the vocabulary connection (ATTACH): a snapshot stays one.
        self._uri = f"file:{quote(str(path.resolve()))}?mode=ro" + ("&immutable=1" if self.conn.immutable else "")
        self._vocab_conn: sqlite3.Connection | None = None
        self.schema: SourceSchema = detect(self.conn)
        self.statement_ms = statement_ms
        self._deadline = 0.0
        self.conn.set_progress_handler(self._progress, 10_000)
        self.lexical_index: Any = None  # set by the engine when the database has no FTS tables

    def close(self) -> None:
        """Close the connections."""
        self.conn.close()
        if self._vocab_conn is not None:
            self._vocab_conn.close()

    def _progress(self) -> int:
        return 1 if self._deadline and time.monotonic() > self._deadline else 0

    @contextmanager
    def _limited(self) -> Iterator[None]:
        self._deadline = time.monotonic() + self.statement_ms / 1000
        try:
            yield
        except sqlite3.Error as exc:
            if "interrupted" in str(exc):
                raise QueryTimeout(f"query exceeded {self.statement_ms} ms") from exc
            # The database went away, is locked past the busy timeout, or is damaged: a typed
            # error at the boundary (callers map it to an exit code, a 503 or a tool error).
            raise SourceUnavailable(f"reading the database failed: {exc}") from exc
        finally:
            self._deadline = 0.0

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Run one bounded-time statement and fetch all rows."""
        with self._limited():
            return fetch_all(self.conn, sql, tuple(params))

    # -- columns -------------------------------------------------------------------------------
    def col(self, kind: Kind | str, logical: str) -> str | None:
        """Quoted physical column (``t."name"``) for a logical one, or None when absent."""
        table = TABLES[kind] if isinstance(kind, Kind) else kind
        physical = self.schema.column(table, logical)
        return f'{ALIAS}."{physical}"' if physical else None

    def project_expr(self, kind: Kind) -> str:
        """SQL for a row's project (prompts take theirs from their session)."""
        if kind is Kind.PROMPT:  # an index lookup per row (see SourceSchema.session_match)
            match = self.schema.session_match(kind, ALIAS, "s")
            return f"(SELECT s.project FROM {SESSIONS_TABLE} s WHERE {match} LIMIT 1)"
        return f"{ALIAS}.project"

    # -- filters -------------------------------------------------------------------------------
    def applicable(self, kind: Kind, filters: Filters) -> bool:
        """Whether rows of ``kind`` can match at all (types/concepts exist only on observations,
        files on observations and summaries)."""
        if filters.observation_only and kind is not Kind.OBSERVATION:
            return False
        return not (filters.files and kind is Kind.PROMPT)

    def where(self, kind: Kind, filters: Filters, window: Window | None) -> tuple[str, list[Any]]:
        """A WHERE fragment (without the keyword) and its parameters, for alias ``t``."""
        parts: list[str] = []
        params: list[Any] = []
        if filters.project:
            if kind is Kind.PROMPT:
                parts.append(f"{self.project_expr(kind)} = ?")
                params.append(filters.project)
            else:
                merged = self.col(kind, "merged_into_project")
                parts.append(f"({ALIAS}.project = ? OR {merged} = ?)" if merged else f"{ALIAS}.project = ?")
                params.extend([filters.project, filters.project] if merged else [filters.project])
        if filters.types:
            parts.append(f"{ALIAS}.type IN ({','.join('?' * len(filters.types))})")
            params.extend(filters.types)
        if filters.concepts:
            parts.append("(" + " OR ".join(f"{ALIAS}.concepts LIKE ? ESCAPE '\\'" for _ in filters.concepts) + ")")
            params.extend(f"%{_like(c)}%" for c in filters.concepts)
        if filters.files:
            cols = ["files_read", "files_modified"] if kind is Kind.OBSERVATION else ["files_read", "files_edited"]
            ors = [f"{c} LIKE ? ESCAPE '\\'" for c in (self.col(kind, x) for x in cols) if c for _ in filters.files]
            parts.append("(" + (" OR ".join(ors) or "0") + ")")
            params.extend(f"%{_like(f)}%" for c in cols if self.col(kind, c) for f in filters.files)
        if window is not None:
            if window.start_ms is not None:
                parts.append(f"{ALIAS}.created_at_epoch >= ?")
                params.append(window.start_ms)
            if window.end_ms is not None:
                parts.append(f"{ALIAS}.created_at_epoch <= ?")
                params.append(window.end_ms)
        return (" AND ".join(parts) or "1"), params

    # -- lexical -------------------------------------------------------------------------------
    def has_fts(self, kind: Kind) -> bool:
        """Whether the app's FTS5 table for ``kind`` exists."""
        return bool(self.schema.fts.get(kind))

    # -- query terms -----------------------------------------------------------------------------
    def _vocab(self) -> sqlite3.Connection:
        """An in-memory connection with the source attached read-only and fts5vocab tables over the
        app's FTS tables (the agent's database gets no table, not even a temporary one)."""
        if self._vocab_conn is None:
            conn = sqlite3.connect("file::memory:", uri=True, check_same_thread=False)
            try:
                conn.execute("ATTACH ? AS src", (self._uri,))
                for kind in Kind:
                    if self.has_fts(kind):
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
        key = (self._uri, kind, token)
        now = time.monotonic()
        hit = _forms_cache.get(key)
        if hit is not None and now - hit[1] < 60:
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
        if not self.has_fts(kind):  # memsync's own index stems by itself (porter tokenizer)
            return fts.expression_for([(w,) for w in words])
        info = {w: self.forms(kind, w) for w in words}
        n = max(1, self.max_id(kind))
        keep = [w for w in words if info[w][1] <= COMMON_FRACTION * n]
        if not keep:  # every word is in most rows: the rarest carry the query
            keep = sorted(words, key=lambda w: info[w][1])[:MIN_TERMS]
        return fts.expression_for([info[w][0] for w in keep])

    def first_id_since(self, kind: Kind, start_ms: int) -> int:
        """The smallest id of a row created at or after ``start_ms`` (a lower bound, cached for a
        minute per start minute: the bound is taken at the start of the minute, so it is a superset)."""
        floor = start_ms - start_ms % 60_000
        key = (self._uri, kind, floor)
        now = time.monotonic()
        hit = _first_id_cache.get(key)
        if hit is not None and now - hit[1] < 60:
            return hit[0]
        # min(id + 0): stop SQLite from walking the rowid order (it would read most of the table).
        row = self.query(f"SELECT min({ALIAS}.id + 0) FROM {TABLES[kind]} {ALIAS} WHERE {ALIAS}.created_at_epoch >= ?",
                         [floor])
        first = int(row[0][0]) if row[0][0] is not None else self.max_id(kind) + 1
        if len(_first_id_cache) > 1000:
            _first_id_cache.clear()
        _first_id_cache[key] = (first, now)
        return first

    def max_id(self, kind: Kind) -> int:
        """The largest id of ``kind`` (an estimate of the row count that costs one index seek)."""
        row = self.query(f"SELECT max(id) FROM {TABLES[kind]}")
        return int(row[0][0] or 0)

    def lexical(self, kind: Kind, expr: str, filters: Filters, window: Window | None, limit: int,
                order: str = "rank", after_id: int = 0) -> list[tuple[int, float]]:
        """Rows of ``kind`` (with id > ``after_id``) matching the MATCH expression within
        filters/window: (id, bm25) with higher = better, best first (or newest/oldest first when
        ``order`` says so)."""
        if not self.applicable(kind, filters):
            return []
        if not self.has_fts(kind):
            ids = self.lexical_index.match(kind, expr, limit=None) if self.lexical_index else []
            ids = [(i, s) for i, s in ids if i > after_id]
            if not ids:
                return []
            return self._filter_ranked(kind, ids, filters, window, limit, order)
        fts = FTS_TABLES[kind][0]
        cond, params = self.where(kind, filters, window)
        if after_id:
            cond += " AND f.rowid > ?"
            params.append(after_id)
        if window is not None and window.start_ms is not None:
            # Rows are appended in time order, so the window is (almost) an id range, and FTS5 skips
            # whole doclist segments for a rowid bound: ~5x less to score. Exact: the bound is the
            # smallest id of any row in the window.
            cond += " AND f.rowid >= ?"
            params.append(self.first_id_since(kind, window.start_ms))
        if order == "rank":
            bound = self._rank_bound(kind, expr, cond, params)
            if bound is not None:
                cond += " AND f.rowid >= ?"
                params.append(bound)
        sort = {"rank": "f.rank", "newest": f"{ALIAS}.created_at_epoch DESC, {ALIAS}.id DESC",
                "oldest": f"{ALIAS}.created_at_epoch ASC, {ALIAS}.id ASC"}[order]
        if cond == "1" and order == "rank":  # nothing to join for: FTS5 alone
            sql = f"SELECT f.rowid AS id, f.rank AS rank FROM {fts} f WHERE {fts} MATCH ? ORDER BY f.rank LIMIT ?"
            return [(int(r["id"]), -float(r["rank"])) for r in self.query(sql, [expr, limit])]
        sql = (f"SELECT {ALIAS}.id AS id, f.rank AS rank FROM {fts} f JOIN {TABLES[kind]} {ALIAS} "
               f"ON {ALIAS}.id = f.rowid WHERE {fts} MATCH ? AND {cond} ORDER BY {sort} LIMIT ?")
        return [(int(r["id"]), -float(r["rank"])) for r in self.query(sql, [expr, *params, limit])]

    def _rank_bound(self, kind: Kind, expr: str, cond: str, params: list[Any]) -> int | None:
        """The rowid of the RANK_CAP-th newest match, when there are more matches than that.

        BM25 scores every matching row (about 2 us each), so a query whose every word is common
        would cost tens of ms per table at 100k rows. Ranking only the newest RANK_CAP matches
        (within the filters) bounds that; it changes nothing while a query matches fewer rows, which
        after dropping the common words (see ``expression``) is the usual case."""
        fts = FTS_TABLES[kind][0]
        if cond == "1":
            sql = f"SELECT f.rowid FROM {fts} f WHERE {fts} MATCH ? ORDER BY f.rowid DESC LIMIT 1 OFFSET ?"
            row = self.query(sql, [expr, RANK_CAP - 1])
        else:
            sql = (f"SELECT f.rowid FROM {fts} f JOIN {TABLES[kind]} {ALIAS} ON {ALIAS}.id = f.rowid "
                   f"WHERE {fts} MATCH ? AND {cond} ORDER BY f.rowid DESC LIMIT 1 OFFSET ?")
            row = self.query(sql, [expr, *params, RANK_CAP - 1])
        return int(row[0][0]) if row else None

    def _filter_ranked(self, kind: Kind, ranked: list[tuple[int, float]], filters: Filters, window: Window | None,
                       limit: int, order: str) -> list[tuple[int, float]]:
        keep = self.passing(kind, [i for i, _ in ranked], filters, window)
        out = [(i, s) for i, s in ranked if i in keep]
        if order != "rank":
            epochs = self.epochs(kind, [i for i, _ in out])
            out.sort(key=lambda x: (epochs.get(x[0], 0), x[0]), reverse=order == "newest")
        return out[:limit]

    def lexical_count(self, kind: Kind, expr: str, filters: Filters, window: Window | None, cap: int,
                      after_id: int = 0) -> int:
        """How many rows (with id > ``after_id``) match, up to ``cap``, e.g. outside the window;
        unranked, so cheap."""
        if not self.applicable(kind, filters):
            return 0
        if not self.has_fts(kind):
            return len(self.lexical(kind, expr, filters, window, cap, after_id=after_id))
        fts_table = FTS_TABLES[kind][0]
        cond, params = self.where(kind, filters, window)
        if after_id:
            cond += " AND f.rowid > ?"
            params.append(after_id)
        sql = (f"SELECT count(*) FROM (SELECT 1 FROM {fts_table} f JOIN {TABLES[kind]} {ALIAS} "
               f"ON {ALIAS}.id = f.rowid WHERE {fts_table} MATCH ? AND {cond} LIMIT ?)")
        return int(self.query(sql, [expr, *params, cap])[0][0])

    # -- membership and hydration --------------------------------------------------------------
    def passing(self, kind: Kind, ids: Sequence[int], filters: Filters, window: Window | None) -> set[int]:
        """The subset of ``ids`` that exist and satisfy filters and window."""
        if not ids or not self.applicable(kind, filters):
            return set()
        cond, params = self.where(kind, filters, window)
        out: set[int] = set()
        for chunk in _chunks(list(ids), 900):
            sql = (f"SELECT {ALIAS}.id FROM {TABLES[kind]} {ALIAS} WHERE {ALIAS}.id IN "
                   f"({','.join('?' * len(chunk))}) AND {cond}")
            out.update(int(r[0]) for r in self.query(sql, [*chunk, *params]))
        return out

    def filtered_ids(self, kind: Kind, filters: Filters, window: Window | None, cap: int) -> list[int] | None:
        """All ids of ``kind`` within filters/window, newest first, or None when there are more
        than ``cap`` (the caller then uses another strategy)."""
        if not self.applicable(kind, filters):
            return []
        cond, params = self.where(kind, filters, window)
        sql = (f"SELECT {ALIAS}.id FROM {TABLES[kind]} {ALIAS} WHERE {cond} "
               f"ORDER BY {ALIAS}.created_at_epoch DESC LIMIT ?")
        rows = self.query(sql, [*params, cap + 1])
        return None if len(rows) > cap else [int(r[0]) for r in rows]

    def fact_counts(self, ids: Sequence[int]) -> dict[int, int]:
        """Length of each observation's facts list (0 when absent or not a JSON list)."""
        out: dict[int, int] = {}
        for chunk in _chunks(list(ids), 900):
            sql = (f"SELECT {ALIAS}.id, CASE WHEN json_valid({ALIAS}.facts) AND json_type({ALIAS}.facts) = 'array' "
                   f"THEN json_array_length({ALIAS}.facts) ELSE 0 END FROM observations {ALIAS} "
                   f"WHERE {ALIAS}.id IN ({','.join('?' * len(chunk))})")
            out.update((int(r[0]), int(r[1] or 0)) for r in self.query(sql, chunk))
        return out

    def epochs(self, kind: Kind, ids: Sequence[int]) -> dict[int, int]:
        """created_at_epoch of each id."""
        out: dict[int, int] = {}
        for chunk in _chunks(list(ids), 900):
            sql = (f"SELECT {ALIAS}.id, {ALIAS}.created_at_epoch FROM {TABLES[kind]} {ALIAS} "
                   f"WHERE {ALIAS}.id IN ({','.join('?' * len(chunk))})")
            out.update((int(r[0]), int(r[1] or 0)) for r in self.query(sql, chunk))
        return out

    def hydrate(self, kind: Kind, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """Full rows by id (one ``IN`` query per kind; logical column names; JSON lists parsed;
        prompts carry their session's project)."""
        if not ids:
            return {}
        table = TABLES[kind]
        select = self.schema.select_list(table, ALIAS)
        extra = f", {self.project_expr(kind)} AS project" if kind is Kind.PROMPT else ""
        out: dict[int, dict[str, Any]] = {}
        for chunk in _chunks(list(dict.fromkeys(ids)), 900):
            sql = f"SELECT {select}{extra} FROM {table} {ALIAS} WHERE {ALIAS}.id IN ({','.join('?' * len(chunk))})"
            for r in self.query(sql, chunk):
                row = {k: r[k] for k in r.keys()}  # noqa: SIM118 - iterating a Row yields values
                for key in LIST_COLUMNS & row.keys():
                    if row[key] is not None:
                        row[key] = parse_list(row[key])
                row["kind"] = kind.value
                out[int(row["id"])] = row
        return out

    # -- links between kinds ---------------------------------------------------------------------
    def prompts_of_observations(self, obs_ids: Sequence[int]) -> dict[int, int]:
        """observation id → the id of the user prompt it was recorded under (same session, same
        prompt_number), for observations that have one."""
        if not obs_ids:
            return {}
        pnum = self.col(Kind.OBSERVATION, "prompt_number")
        obs_session = self.schema.session_match(Kind.OBSERVATION, ALIAS, "s")
        prompt_session = self.schema.session_match(Kind.PROMPT, "p", "s")
        if not pnum or "0" in (obs_session, prompt_session):
            return {}
        out: dict[int, int] = {}
        for chunk in _chunks(list(obs_ids), 900):
            sql = (f"SELECT {ALIAS}.id AS oid, p.id AS pid FROM observations {ALIAS} "
                   f"JOIN {SESSIONS_TABLE} s ON {obs_session} "
                   f"JOIN user_prompts p ON {prompt_session} AND p.prompt_number = {pnum} "
                   f"WHERE {ALIAS}.id IN ({','.join('?' * len(chunk))})")
            for r in self.query(sql, chunk):
                out.setdefault(int(r["oid"]), int(r["pid"]))
        return out

    # -- vocabulary of filters -----------------------------------------------------------------
    def distinct(self, kind: Kind, logical: str, limit: int = 1000) -> list[str]:
        """Distinct non-empty values of one column (observation types, projects), sorted."""
        column = self.col(kind, logical)
        if column is None:
            return []
        sql = (f"SELECT DISTINCT {column} AS v FROM {TABLES[kind]} {ALIAS} "
               f"WHERE {column} IS NOT NULL AND {column} != '' ORDER BY v LIMIT ?")
        return [str(r[0]) for r in self.query(sql, [limit])]

    # -- timeline ------------------------------------------------------------------------------
    def around(self, kind: Kind, epoch: int, project: str | None, before: bool, limit: int,
               inclusive: bool = False) -> list[tuple[int, int]]:
        """(id, epoch) of up to ``limit`` rows of ``kind`` just before (or after) ``epoch``."""
        filters = Filters(project=project)
        cond, params = self.where(kind, filters, None)
        op = ("<=" if inclusive else "<") if before else (">=" if inclusive else ">")
        sort = "DESC" if before else "ASC"
        sql = (f"SELECT {ALIAS}.id, {ALIAS}.created_at_epoch FROM {TABLES[kind]} {ALIAS} "
               f"WHERE {ALIAS}.created_at_epoch {op} ? AND {cond} "
               f"ORDER BY {ALIAS}.created_at_epoch {sort}, {ALIAS}.id {sort} LIMIT ?")
        return [(int(r[0]), int(r[1])) for r in self.query(sql, [epoch, *params, limit])]

    def count(self, kind: Kind, filters: Filters, window: Window | None) -> int:
        """Rows of ``kind`` within the filters and window."""
        if not self.applicable(kind, filters):
            return 0
        cond, params = self.where(kind, filters, window)
        return int(self.query(f"SELECT COUNT(*) FROM {TABLES[kind]} {ALIAS} WHERE {cond}", params)[0][0])

    def recent(self, kind: Kind, filters: Filters, window: Window | None, limit: int,
               offset: int = 0, newest: bool = True) -> list[tuple[int, int]]:
        """(id, epoch) of the newest (or oldest) rows within filters/window."""
        if not self.applicable(kind, filters):
            return []
        cond, params = self.where(kind, filters, window)
        sort = "DESC" if newest else "ASC"
        sql = (f"SELECT {ALIAS}.id, {ALIAS}.created_at_epoch FROM {TABLES[kind]} {ALIAS} WHERE {cond} "
               f"ORDER BY {ALIAS}.created_at_epoch {sort}, {ALIAS}.id {sort} LIMIT ? OFFSET ?")
        return [(int(r[0]), int(r[1])) for r in self.query(sql, [*params, limit, offset])]


def title_of(kind: Kind, row: dict[str, Any]) -> str:
    """A one-line title: the observation's title, or the first line of the main text."""
    if kind is Kind.OBSERVATION:
        text = row.get("title") or row.get("subtitle") or row.get("narrative") or row.get("text") or ""
    elif kind is Kind.SUMMARY:
        text = next((row.get(f) for f in SUMMARY_FIELDS if row.get(f)), "") or ""
    else:
        text = row.get("prompt_text") or ""
    line = " ".join(str(text).split())
    return line if len(line) <= 120 else line[:117] + "..."


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
