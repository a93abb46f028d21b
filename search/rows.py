"""Everything the search asks SQLite: filters as SQL, lexical matches, hydration, timelines.

One read-only connection to the agent's database (``mode=ro``, ``query_only``), every value a
bound parameter (user text never becomes SQL), and a time limit on each statement through a
progress handler, so a pathological FTS query is interrupted instead of holding the caller.
Column names go through the era mapping of ``config.schema``: both schema eras are read.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from config.schema import FTS_TABLES, SESSIONS_TABLE, SUMMARY_FIELDS, TABLES, Kind, SourceSchema, detect
from config.sources import fetch_all, open_source_db
from search.models import Filters, Window

ALIAS = "t"


class QueryTimeout(RuntimeError):
    """A statement ran past its time limit and was interrupted."""


class SourceRows:
    """Read-only access to the agent's database for one search call (or one server, shared)."""

    def __init__(self, path: Path, busy_timeout_ms: int = 5000, statement_ms: int = 2000) -> None:
        self.conn = open_source_db(path, busy_timeout_ms)
        self.schema: SourceSchema = detect(self.conn)
        self.statement_ms = statement_ms
        self._deadline = 0.0
        self.conn.set_progress_handler(self._progress, 10_000)
        self.lexical_index: Any = None  # set by the engine when the database has no FTS tables

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    def _progress(self) -> int:
        return 1 if self._deadline and time.monotonic() > self._deadline else 0

    @contextmanager
    def _limited(self) -> Iterator[None]:
        self._deadline = time.monotonic() + self.statement_ms / 1000
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "interrupted" in str(exc):
                raise QueryTimeout(f"query exceeded {self.statement_ms} ms") from exc
            raise
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

    def _session_col(self, logical: str) -> str:
        physical = self.schema.column(SESSIONS_TABLE, logical)
        return f'"{physical}"' if physical else "NULL"

    def project_expr(self, kind: Kind) -> str:
        """SQL for a row's project (prompts take theirs from their session)."""
        if kind is Kind.PROMPT:
            content = self.col(kind, "content_session_id")
            return (f"(SELECT s.project FROM {SESSIONS_TABLE} s WHERE s.{self._session_col('content_session_id')}"
                    f" = {content} LIMIT 1)")
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

    def lexical(self, kind: Kind, expr: str, filters: Filters, window: Window | None, limit: int,
                order: str = "rank") -> list[tuple[int, float]]:
        """Rows of ``kind`` matching the MATCH expression within filters/window: (id, bm25) with
        higher = better, best first (or newest/oldest first when ``order`` says so)."""
        if not self.applicable(kind, filters):
            return []
        if not self.has_fts(kind):
            ids = self.lexical_index.match(kind, expr, limit=None) if self.lexical_index else []
            if not ids:
                return []
            return self._filter_ranked(kind, ids, filters, window, limit, order)
        fts = FTS_TABLES[kind][0]
        cond, params = self.where(kind, filters, window)
        sort = {"rank": "f.rank", "newest": f"{ALIAS}.created_at_epoch DESC, {ALIAS}.id DESC",
                "oldest": f"{ALIAS}.created_at_epoch ASC, {ALIAS}.id ASC"}[order]
        sql = (f"SELECT {ALIAS}.id AS id, f.rank AS rank FROM {fts} f JOIN {TABLES[kind]} {ALIAS} "
               f"ON {ALIAS}.id = f.rowid WHERE {fts} MATCH ? AND {cond} ORDER BY {sort} LIMIT ?")
        return [(int(r["id"]), -float(r["rank"])) for r in self.query(sql, [expr, *params, limit])]

    def _filter_ranked(self, kind: Kind, ranked: list[tuple[int, float]], filters: Filters, window: Window | None,
                       limit: int, order: str) -> list[tuple[int, float]]:
        keep = self.passing(kind, [i for i, _ in ranked], filters, window)
        out = [(i, s) for i, s in ranked if i in keep]
        if order != "rank":
            epochs = self.epochs(kind, [i for i, _ in out])
            out.sort(key=lambda x: (epochs.get(x[0], 0), x[0]), reverse=order == "newest")
        return out[:limit]

    def lexical_count(self, kind: Kind, expr: str, filters: Filters, window: Window | None, cap: int) -> int:
        """How many rows match (up to ``cap``), e.g. outside the window."""
        return len(self.lexical(kind, expr, filters, window, cap))

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
                for key in ("facts", "concepts", "files_read", "files_modified", "files_edited"):
                    if key in row:
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
        mem = self.col(Kind.OBSERVATION, "memory_session_id")
        pnum = self.col(Kind.OBSERVATION, "prompt_number")
        p_content = self.schema.column(TABLES[Kind.PROMPT], "content_session_id")
        if not (mem and pnum and p_content):
            return {}
        out: dict[int, int] = {}
        for chunk in _chunks(list(obs_ids), 900):
            sql = (f"SELECT {ALIAS}.id AS oid, p.id AS pid FROM observations {ALIAS} "
                   f"JOIN {SESSIONS_TABLE} s ON s.{self._session_col('memory_session_id')} = {mem} "
                   f"JOIN user_prompts p ON p.\"{p_content}\" = s.{self._session_col('content_session_id')} "
                   f"AND p.prompt_number = {pnum} "
                   f"WHERE {ALIAS}.id IN ({','.join('?' * len(chunk))})")
            for r in self.query(sql, chunk):
                out.setdefault(int(r["oid"]), int(r["pid"]))
        return out

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

    def count(self, kind: Kind) -> int:
        """Rows of ``kind``."""
        return int(self.query(f"SELECT count(*) FROM {TABLES[kind]}")[0][0])


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


def parse_list(value: Any) -> Any:
    """A JSON list column as a list; other JSON or plain text is returned as it is."""
    if isinstance(value, str) and value.startswith("["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
