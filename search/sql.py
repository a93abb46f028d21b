"""The read-only connection to the agent's database, its time limit, and filters/window as SQL.

One read-only connection (``mode=ro``, ``query_only``), every value a bound parameter (user text
never becomes SQL), and a time limit on each statement through a progress handler, so a
pathological query is interrupted (:class:`QueryTimeout`) instead of holding the caller. Column
names go through the era mapping of ``config.claude_mem.schema``: both schema eras are read.
Besides the filters, the membership questions every part of a search asks live here: which ids
pass, their dates, the newest rows, the rows around a date, the session and prompt a row was recorded under.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from memsync.config.claude_mem.connection import fetch_all, open_source_db
from memsync.config.claude_mem.platform import DEFAULT_PLATFORM, normalize_platform
from memsync.config.claude_mem.projects import SQL_FUNCTION as EXCLUDED_SQL
from memsync.config.claude_mem.projects import ProjectExclusion, exclusion
from memsync.config.claude_mem.schema import SESSIONS_TABLE, TABLES, Kind, SourceSchema, detect
from memsync.config.errors import SourceUnavailable
from memsync.config.inlists import chunks
from memsync.config.settings import Settings
from memsync.search.models import Filters, Scope, Window

ALIAS = "t"
_first_id_cache: dict[tuple[str, Kind, int], tuple[int, float]] = {}


class QueryTimeout(SourceUnavailable, RuntimeError):
    """A statement ran past its time limit and was interrupted."""


class SourceRows:
    """Read-only access to the agent's database for one search call (or one server, shared)."""

    def __init__(self, path: Path, busy_timeout_ms: int = 5000, statement_ms: int = 2000,
                 exclusion: ProjectExclusion | None = None) -> None:
        self.conn = open_source_db(path, busy_timeout_ms)
        # How the file was opened, for another connection that must see the same (ATTACH): a
        # snapshot stays one.
        self.uri = f"file:{quote(str(path.resolve()))}?mode=ro" + ("&immutable=1" if self.conn.immutable else "")
        self.schema: SourceSchema = detect(self.conn)
        self.statement_ms = statement_ms
        self._deadline = 0.0
        self.conn.set_progress_handler(self._progress, 10_000)
        # The platform filter compares normalised values (stored ones predate upstream's rule).
        self.conn.create_function("memsync_platform", 1, normalize_platform, deterministic=True)
        # Excluded projects are never an answer, whatever index a row came from.
        # (claude-mem's own project always: config.claude_mem.projects.INTERNAL_PROJECTS)
        self.exclusion = exclusion if exclusion is not None else ProjectExclusion.of(())
        self.conn.create_function(EXCLUDED_SQL, 2, self.exclusion.sql, deterministic=True)
        # Without patterns only claude-mem's own project is excluded, and most databases hold none
        # of its rows: whether they do is read once here (lookups on claude-mem's indexes), so that
        # a search of such a database carries no condition at all (FTS5 alone stays FTS5 alone) and
        # one that holds some compares plain values. None: patterns, each statement decides.
        try:
            self._internal = None if self.exclusion.patterned else self._internal_rows()
        except BaseException:
            self.conn.close()
            raise

    @classmethod
    def open(cls, settings: Settings) -> SourceRows:
        """A connection to the configured database with the configured busy timeout and time limit."""
        return cls(settings.db, settings.sqlite_busy_timeout_ms, settings.fts_timeout_ms,
                   exclusion(settings.excluded_projects))

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

    # -- columns and filters -----------------------------------------------------------------------
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

    def _internal_rows(self) -> frozenset[Kind]:
        """The kinds of which this database holds rows of claude-mem's own project (a prompt's by
        its session; see ``__init__``)."""
        kinds = set()
        if (pair := self.schema.session_key(Kind.PROMPT)) is not None and \
                self.query(f"SELECT EXISTS({self._excluded_sessions(pair[1])})")[0][0]:
            kinds.add(Kind.PROMPT)
        # By the row's own project and the one it was merged into: claude-mem indexes both (the
        # merged one's index comes with its column), so each is a lookup.
        for kind in (Kind.OBSERVATION, Kind.SUMMARY):
            cols = [c for c in (self.col(kind, "project"), self.col(kind, "merged_into_project")) if c]
            found = " OR ".join(f"EXISTS(SELECT 1 FROM {TABLES[kind]} {ALIAS} WHERE {self.exclusion.named(c)})"
                                for c in cols)
            if found and self.query(f"SELECT {found}")[0][0]:
                kinds.add(kind)
        return frozenset(kinds)

    def _excluded_sessions(self, column: str) -> str:
        """SQL of the ``column`` values of the sessions of excluded projects."""
        return (f'SELECT s."{column}" FROM {SESSIONS_TABLE} s WHERE s."{column}" IS NOT NULL '
                f"AND {self.exclusion.named('s.project')}")

    def not_excluded(self, kind: Kind) -> str:
        """SQL true for a row (alias ``t``) outside the excluded projects (``"1"``: none of this
        kind is excluded in this database)."""
        if self._internal is not None and kind not in self._internal:
            return "1"
        if kind is Kind.PROMPT:
            # A prompt's project is its session's: the excluded sessions, found once per statement
            # (an uncorrelated subquery, an index lookup without patterns), not looked up per row;
            # a prompt without a session has no project and stays.
            pair = self.schema.session_key(kind)
            if pair is None:
                return "1"
            own, theirs = pair
            return f'({ALIAS}."{own}" IS NULL OR {ALIAS}."{own}" NOT IN ({self._excluded_sessions(theirs)}))'
        merged = self.col(kind, "merged_into_project")
        return f"NOT {self.exclusion.condition(f'{ALIAS}.project', merged or 'NULL')}"

    def has_fts(self, kind: Kind) -> bool:
        """Whether the app's FTS5 table for ``kind`` exists."""
        return bool(self.schema.fts.get(kind))

    @staticmethod
    def applicable(kind: Kind, filters: Filters) -> bool:
        """Whether rows of ``kind`` can match at all (each filter's kinds: ``config.filters``)."""
        return filters.admits(kind)

    def where(self, kind: Kind, filters: Filters, window: Window | None) -> tuple[str, list[Any]]:
        """A WHERE fragment (without the keyword) and its parameters, for alias ``t``."""
        parts: list[str] = []
        params: list[Any] = []
        if (hidden := self.not_excluded(kind)) != "1":
            parts.append(hidden)
        if names := filters.projects():
            marks = f"IN ({', '.join('?' * len(names))})"
            if kind is Kind.PROMPT:
                parts.append(f"{self.project_expr(kind)} {marks}")
                params.extend(names)
            else:
                merged = self.col(kind, "merged_into_project")
                parts.append(f"({ALIAS}.project {marks} OR {merged} {marks})" if merged else f"{ALIAS}.project {marks}")
                params.extend([*names, *names] if merged else names)
        if filters.platform:
            platform = self.schema.column(SESSIONS_TABLE, "platform_source")
            match = self.schema.session_match(kind, ALIAS, "s")
            if platform and match != "0":
                session = f'(SELECT s."{platform}" FROM {SESSIONS_TABLE} s WHERE {match} LIMIT 1)'
                parts.append(f"memsync_platform({session}) = ?")
                params.append(normalize_platform(filters.platform))
            elif normalize_platform(filters.platform) != DEFAULT_PLATFORM:
                parts.append("0")  # a file without platforms: everything in it was recorded by claude
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

    # -- ids -----------------------------------------------------------------------------------------
    def first_id_since(self, kind: Kind, start_ms: int) -> int:
        """The smallest id of a row created at or after ``start_ms`` (a lower bound, cached for a
        minute per start minute: the bound is taken at the start of the minute, so it is a superset)."""
        floor = start_ms - start_ms % 60_000
        key = (self.uri, kind, floor)
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

    def passing(self, kind: Kind, ids: Sequence[int], filters: Filters, window: Window | None) -> set[int]:
        """The subset of ``ids`` that exist and satisfy filters and window."""
        if not ids or not self.applicable(kind, filters):
            return set()
        cond, params = self.where(kind, filters, window)
        out: set[int] = set()
        for chunk in chunks(list(ids)):
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
        for chunk in chunks(list(ids)):
            sql = (f"SELECT {ALIAS}.id, CASE WHEN json_valid({ALIAS}.facts) AND json_type({ALIAS}.facts) = 'array' "
                   f"THEN json_array_length({ALIAS}.facts) ELSE 0 END FROM observations {ALIAS} "
                   f"WHERE {ALIAS}.id IN ({','.join('?' * len(chunk))})")
            out.update((int(r[0]), int(r[1] or 0)) for r in self.query(sql, chunk))
        return out

    def epochs(self, kind: Kind, ids: Sequence[int]) -> dict[int, int]:
        """created_at_epoch of each id (rows of excluded projects have none: they do not exist for a search)."""
        out: dict[int, int] = {}
        for chunk in chunks(list(ids)):
            sql = (f"SELECT {ALIAS}.id, {ALIAS}.created_at_epoch FROM {TABLES[kind]} {ALIAS} "
                   f"WHERE {ALIAS}.id IN ({','.join('?' * len(chunk))}) AND {self.not_excluded(kind)}")
            out.update((int(r[0]), int(r[1] or 0)) for r in self.query(sql, chunk))
        return out

    def texts(self, kind: Kind, ids: Sequence[int], columns: Sequence[str]) -> dict[int, str]:
        """The given logical text columns of each row, joined by spaces (absent columns skipped)."""
        cols = [c for c in (self.col(kind, name) for name in columns) if c]
        if not ids or not cols:
            return {}
        joined = " || ' ' || ".join(f"COALESCE({c}, '')" for c in cols)
        out: dict[int, str] = {}
        for chunk in chunks(list(ids)):
            sql = (f"SELECT {ALIAS}.id, {joined} FROM {TABLES[kind]} {ALIAS} "
                   f"WHERE {ALIAS}.id IN ({','.join('?' * len(chunk))})")
            out.update((int(r[0]), str(r[1])) for r in self.query(sql, chunk))
        return out

    # -- links between kinds -------------------------------------------------------------------------
    def recorded_under(self, keys: Sequence[tuple[Kind, int]]) -> dict[tuple[Kind, int], tuple[int, int]]:
        """(session id, prompt number) each observation/summary key was recorded under, for those
        that have both (linked evidence, ``search.links``)."""
        out: dict[tuple[Kind, int], tuple[int, int]] = {}
        for kind in (Kind.OBSERVATION, Kind.SUMMARY):
            ids = [i for k, i in keys if k is kind]
            pnum = self.col(kind, "prompt_number")
            match = self.schema.session_match(kind, ALIAS, "s")
            if not ids or not pnum or match == "0":
                continue
            for chunk in chunks(ids):
                sql = (f"SELECT {ALIAS}.id AS id, s.id AS session, {pnum} AS num FROM {TABLES[kind]} {ALIAS} "
                       f"JOIN {SESSIONS_TABLE} s ON {match} "
                       f"WHERE {ALIAS}.id IN ({','.join('?' * len(chunk))}) AND {pnum} IS NOT NULL")
                for r in self.query(sql, chunk):
                    out.setdefault((kind, int(r["id"])), (int(r["session"]), int(r["num"])))
        return out

    def positions(self, keys: Sequence[tuple[Kind, int]]) -> dict[tuple[Kind, int], tuple[int, int, int]]:
        """(session id, prompt number, text length) of each row that has a session and a number:
        where in its session a row was recorded (the length is the prompt's; 0 for observations
        and summaries). Rows without both are left out (``search.relevance``: no neighbours)."""
        out = {key: (session, num, 0) for key, (session, num) in
               self.recorded_under([k for k in keys if k[0] is not Kind.PROMPT]).items()}
        ids = [i for k, i in keys if k is Kind.PROMPT]
        pnum, match = self.col(Kind.PROMPT, "prompt_number"), self.schema.session_match(Kind.PROMPT, ALIAS, "s")
        text = self.col(Kind.PROMPT, "prompt_text")
        if not ids or not pnum or match == "0":
            return out
        length = f"length({text})" if text else "0"
        for chunk in chunks(ids):
            sql = (f"SELECT {ALIAS}.id AS id, s.id AS session, {pnum} AS num, {length} AS chars "
                   f"FROM user_prompts {ALIAS} JOIN {SESSIONS_TABLE} s ON {match} "
                   f"WHERE {ALIAS}.id IN ({','.join('?' * len(chunk))}) AND {pnum} IS NOT NULL")
            for r in self.query(sql, chunk):
                out.setdefault((Kind.PROMPT, int(r["id"])), (int(r["session"]), int(r["num"]), int(r["chars"] or 0)))
        return out

    def neighbour_prompts(self, ids: Sequence[int]) -> dict[int, list[int]]:
        """prompt id -> the ids of the prompts just before and after it in its session (by prompt
        number; a gap in the numbering, a deleted or unrecorded prompt, is stepped over)."""
        pnum = self.schema.column("user_prompts", "prompt_number")
        mine, theirs = (self.schema.session_match(Kind.PROMPT, a, "s") for a in (ALIAS, "n"))
        out: dict[int, list[int]] = {}
        if not pnum or "0" in (mine, theirs):
            return out
        mine_num, their_num = f'{ALIAS}."{pnum}"', f'n."{pnum}"'
        for chunk in chunks(list(ids)):
            sql = (f"SELECT {ALIAS}.id AS id, "
                   f"(SELECT n.id FROM user_prompts n WHERE {theirs} AND {their_num} < {mine_num} "
                   f"ORDER BY {their_num} DESC, n.id DESC LIMIT 1) AS prev, "
                   f"(SELECT n.id FROM user_prompts n WHERE {theirs} AND {their_num} > {mine_num} "
                   f"ORDER BY {their_num}, n.id LIMIT 1) AS next "
                   f"FROM user_prompts {ALIAS} JOIN {SESSIONS_TABLE} s ON {mine} "
                   f"WHERE {ALIAS}.id IN ({','.join('?' * len(chunk))}) AND {mine_num} IS NOT NULL")
            for r in self.query(sql, chunk):
                found = [int(x) for x in (r["prev"], r["next"]) if x is not None]
                if found:
                    out[int(r["id"])] = found
        return out

    def session_prompts(self, sessions: set[int]) -> dict[int, list[tuple[int, int]]]:
        """session id -> [(prompt_number, prompt id)] of its prompts, in number order."""
        out: dict[int, list[tuple[int, int]]] = {}
        for r in self._per_session(Kind.PROMPT, sessions, f"{ALIAS}.id AS id"):
            out.setdefault(int(r["session"]), []).append((int(r["num"]), int(r["id"])))
        for plist in out.values():
            plist.sort()
        return out

    def fan_in(self, sessions: set[int]) -> dict[tuple[int, int], int]:
        """(session, prompt_number) -> how many observations were recorded under that prompt."""
        rows = self._per_session(Kind.OBSERVATION, sessions, "COUNT(*) AS n", group=True)
        return {(int(r["session"]), int(r["num"])): int(r["n"]) for r in rows}

    def _per_session(self, kind: Kind, sessions: set[int], select: str, group: bool = False) -> list[sqlite3.Row]:
        """Rows of ``kind`` with a prompt number in the given sessions (sdk_sessions ids), as
        ``session``, ``num`` and ``select`` (grouped by session and number with ``group``)."""
        match = self.schema.session_match(kind, ALIAS, "s")
        pnum = self.col(kind, "prompt_number")
        if match == "0" or not pnum or not sessions:
            return []
        out: list[sqlite3.Row] = []
        for chunk in chunks(sorted(sessions)):
            sql = (f"SELECT s.id AS session, {pnum} AS num, {select} FROM {SESSIONS_TABLE} s "
                   f"JOIN {TABLES[kind]} {ALIAS} ON {match} WHERE s.id IN ({','.join('?' * len(chunk))}) "
                   f"AND {pnum} IS NOT NULL" + (f" GROUP BY s.id, {pnum}" if group else ""))
            out.extend(self.query(sql, chunk))
        return out

    # -- listings --------------------------------------------------------------------------------------
    def distinct(self, kind: Kind, logical: str, limit: int = 1000) -> list[str]:
        """Distinct non-empty values of one column (observation types, projects) among the rows
        outside the excluded projects, sorted."""
        column = self.col(kind, logical)
        if column is None:
            return []
        sql = (f"SELECT DISTINCT {column} AS v FROM {TABLES[kind]} {ALIAS} "
               f"WHERE {column} IS NOT NULL AND {column} != '' AND {self.not_excluded(kind)} ORDER BY v LIMIT ?")
        return [str(r[0]) for r in self.query(sql, [limit])]

    def around(self, kind: Kind, epoch: int, project: str | None, side: Literal["<", "<=", ">", ">="],
               limit: int) -> list[tuple[int, int]]:
        """(id, epoch) of up to ``limit`` rows of ``kind`` on ``side`` of ``epoch`` (``<``: just before
        it, ``>=``: at or after it, ...), nearest first."""
        cond, params = self.where(kind, Filters(project=project), None)
        if side not in ("<", "<=", ">", ">="):  # it becomes SQL text
            raise ValueError(f"side must be <, <=, > or >=, got {side!r}")
        op, sort = side, "DESC" if side.startswith("<") else "ASC"
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

    def behind(self, kind: Kind, filters: Filters, window: Window | None, up_to: int) -> tuple[int, int, int | None]:
        """Rows of ``kind`` within the filters and window: how many, how many have an id at or
        below ``up_to`` (a first sync has not compared them yet), and the newest date among those."""
        if not self.applicable(kind, filters):
            return 0, 0, None
        cond, params = self.where(kind, filters, window)
        row = self.query(f"SELECT COUNT(*), COUNT(CASE WHEN {ALIAS}.id <= ? THEN 1 END), "
                         f"MAX(CASE WHEN {ALIAS}.id <= ? THEN {ALIAS}.created_at_epoch END) "
                         f"FROM {TABLES[kind]} {ALIAS} WHERE {cond}", [up_to, up_to, *params])[0]
        return int(row[0]), int(row[1]), None if row[2] is None else int(row[2])

    def recent(self, kind: Kind, scope: Scope, limit: int, offset: int = 0,
               newest: bool = True) -> list[tuple[int, int]]:
        """(id, epoch) of the newest (or oldest) rows within the scope's filters and window."""
        if not self.applicable(kind, scope.filters):
            return []
        cond, params = self.where(kind, scope.filters, scope.window)
        sort = "DESC" if newest else "ASC"
        sql = (f"SELECT {ALIAS}.id, {ALIAS}.created_at_epoch FROM {TABLES[kind]} {ALIAS} WHERE {cond} "
               f"ORDER BY {ALIAS}.created_at_epoch {sort}, {ALIAS}.id {sort} LIMIT ? OFFSET ?")
        return [(int(r[0]), int(r[1])) for r in self.query(sql, [*params, limit, offset])]


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
