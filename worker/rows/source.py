"""Reading the agent's database: bounded batches by id, short read transactions, both schema eras.

Each read fetches one batch completely (so its read transaction ends) before anything is embedded:
a long-open read would stop the app's WAL checkpoints. The connection is ``mode=ro``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memsync.config import cjk
from memsync.config.claude_mem.connection import decode_text, fetch_all, open_source_db, unreadable
from memsync.config.claude_mem.projects import SQL_FUNCTION as EXCLUDED_SQL
from memsync.config.claude_mem.projects import ProjectExclusion, exclusion
from memsync.config.claude_mem.schema import KINDS, SESSIONS_TABLE, TABLES, Kind, SchemaError, SourceSchema, detect
from memsync.config.formats.text_index import FILTER_COLUMNS, fingerprint_hash
from memsync.config.settings import Settings
from memsync.worker.rows.documents import EXCLUDED_CELL, SourceRow, row_cells_hash, row_shape

FINGERPRINT_SQL = "memsync_fingerprint_hash"  # the SQL function text_fingerprint sums
ROW_HASH_SQL = "memsync_row_hash"  # documents.row_cells_hash, for row_hashes
ROW_HASH_TYPED_SQL = "memsync_row_hash_typed"  # the same over (type, value) pairs, text as bytes


def _typed_row_hash(shape: str, *pairs: Any) -> str:
    """``row_cells_hash`` of cells passed as (SQL type, value) pairs, text as bytes: decoded here as
    ``fetch_all`` decodes text that is not UTF-8."""
    cells = [decode_text(v) if t == "text" else v for t, v in zip(pairs[::2], pairs[1::2], strict=True)]
    return row_cells_hash(shape, *cells)


@dataclass(frozen=True, slots=True)
class RowRef:
    """A row's id and project keys, for status counts."""

    id: int
    project: str
    merged_into_project: str


class SourceReader:
    """Reads claude-mem rows in logical column names, whatever the era of the file."""

    def __init__(self, path: Path, busy_timeout_ms: int = 5000, exclusion: ProjectExclusion | None = None) -> None:
        self.path = path
        self._conn = open_source_db(path, busy_timeout_ms)
        self.immutable = self._conn.immutable  # a snapshot: reopen when the file changes
        # Excluded projects (config.claude_mem.projects): a row's "excluded" cell, read and hashed
        # with its others, so that a change of the setting changes the row's hash and the next pass
        # derives it again (no documents while excluded). Always there: claude-mem's own project is
        # excluded with no pattern set.
        self.exclusion = exclusion if exclusion is not None else ProjectExclusion.of(())
        self._conn.create_function(EXCLUDED_SQL, 2, self.exclusion.sql, deterministic=True)
        self._conn.create_function(FINGERPRINT_SQL, -1, fingerprint_hash, deterministic=True)
        self._conn.create_function(ROW_HASH_SQL, -1, row_cells_hash, deterministic=True)
        self._conn.create_function(ROW_HASH_TYPED_SQL, -1, _typed_row_hash, deterministic=True)
        try:
            self.schema: SourceSchema = detect(self._conn)
        except SchemaError:
            self._conn.close()
            raise
        except sqlite3.DatabaseError as exc:  # damaged since it was opened: degraded, not a crash
            self._conn.close()
            raise unreadable(path, exc) from exc

    @classmethod
    def open(cls, settings: Settings) -> SourceReader:
        """A reader of the configured database, with its busy timeout and excluded projects."""
        return cls(settings.db, settings.sqlite_busy_timeout_ms, exclusion(settings.excluded_projects))

    def close(self) -> None:
        """Close the read-only connection."""
        self._conn.close()

    def __enter__(self) -> SourceReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _row_columns(self, kind: Kind) -> tuple[list[tuple[str, str]], str]:
        """(SQL expression, logical name) of every cell a row of ``kind`` is read as (its table's
        logical columns, then its session's), and the JOIN clause for the session."""
        sch = self.schema
        cols = sch.select_columns(TABLES[kind], "t")
        platform = sch.column(SESSIONS_TABLE, "platform_source")
        cols.append((f's."{platform}"' if platform else "NULL", "platform_source"))
        join = f"LEFT JOIN {SESSIONS_TABLE} s ON {sch.session_match(kind, 't', 's')}"
        if kind is Kind.PROMPT:
            sess_ms = sch.column(SESSIONS_TABLE, "memory_session_id")
            cols += [("s.project", "project"), (f's."{sess_ms}"' if sess_ms else "NULL", "memory_session_id"),
                     ("NULL", "merged_into_project")]
        cols += self._exclusion_columns(kind)
        return cols, join

    def _exclusion_columns(self, kind: Kind) -> list[tuple[str, str]]:
        """The cell a row gets for the excluded projects (its SQL, its name): read and hashed with
        the others, and part of the text index's fingerprint. A list: memsync before 2026-11-29 had
        no such cell without patterns, and its upgrade test stands that in with an empty one."""
        return [(self._excluded_expr(kind), EXCLUDED_CELL)]

    def _excluded_expr(self, kind: Kind) -> str:
        """SQL of whether a row (alias ``t``, its session ``s``) belongs to an excluded project: 1 or 0."""
        if kind is Kind.PROMPT:
            return self.exclusion.condition("s.project")
        merged = "t.merged_into_project" if self.schema.column(TABLES[kind], "merged_into_project") else "NULL"
        return self.exclusion.condition("t.project", merged)

    def _where(self, kind: Kind, project: str | None, up_to: int | None) -> str:
        where = "t.id > :after"
        if up_to is not None:
            where += " AND t.id <= :up_to"
        if project is None:
            return where
        if kind is Kind.PROMPT:
            return where + " AND s.project = :project"
        if self.schema.column(TABLES[kind], "merged_into_project"):
            return where + " AND (t.project = :project OR t.merged_into_project = :project)"
        return where + " AND t.project = :project"

    def read_batch(
        self, kind: Kind, after_id: int, limit: int, project: str | None = None, up_to: int | None = None
    ) -> list[SourceRow]:
        """Rows of ``kind`` with id > ``after_id`` (and <= ``up_to``), by id, at most ``limit``;
        fully fetched (the read transaction is over when this returns)."""
        cols, join = self._row_columns(kind)
        select = ", ".join(f'{expr} AS "{name}"' for expr, name in cols)
        sql = (f"SELECT {select} FROM {TABLES[kind]} t {join} WHERE {self._where(kind, project, up_to)} "
               "ORDER BY t.id LIMIT :limit")
        params = {"after": after_id, "limit": limit, "project": project, "up_to": up_to}
        rows = self._fetch(sql, params)
        return [SourceRow(kind, int(r["id"]), dict(r)) for r in rows]

    def row_hashes(self, kind: Kind, after_id: int, limit: int, project: str | None = None) -> list[tuple[int, str]]:
        """(id, row hash) of the rows ``read_batch`` would return, without reading them into Python:
        SQLite hands each row's cells to the hash function (``documents.row_cells_hash``), so the
        hash equals ``documents.row_values_hash`` of the row ``read_batch`` returns. A pass compares
        these with the sync records and reads in full only the rows that differ (cheap on an unchanged database)."""
        return self._hashes(kind, (after_id, None), limit, project, descending=False)

    def row_hashes_below(self, kind: Kind, up_to: int, limit: int, project: str | None = None) -> list[tuple[int, str]]:
        """:meth:`row_hashes` of the ``limit`` highest ids at or below ``up_to`` (a pass that goes
        from the newest rows backward), in ascending id order as the records are compared."""
        return self._hashes(kind, (0, up_to), limit, project, descending=True)[::-1]

    def _hashes(self, kind: Kind, ids: tuple[int, int | None], limit: int, project: str | None,
                descending: bool) -> list[tuple[int, str]]:
        """(id, row hash) of the first ``limit`` rows in ``ids`` = (after, up_to], by id ascending
        or descending."""
        cols, join = self._row_columns(kind)
        names = [name for _, name in cols]
        if len(set(names)) != len(names):  # a row's values are a dict: the hashes would never agree
            raise SchemaError(f"duplicate column names for {kind.value}: {names}")
        params = {"after": ids[0], "up_to": ids[1], "limit": limit, "project": project,
                  "shape": row_shape(kind, names)}
        order = "DESC" if descending else "ASC"
        where = self._where(kind, project, ids[1])
        tail = f"FROM {TABLES[kind]} t {join} WHERE {where} ORDER BY t.id {order} LIMIT :limit"
        args = ", ".join(expr for expr, _ in cols)
        try:
            return self._fetch_tuples(f"SELECT t.id, {ROW_HASH_SQL}(:shape, {args}) {tail}", params)
        except sqlite3.DatabaseError as exc:
            if "user-defined function" not in str(exc):
                raise unreadable(self.path, exc) from exc
        # Text that is not UTF-8 cannot become a Python argument: pass such cells as bytes with their
        # type, decoded the way a read batch decodes them (replacement characters).
        args = ", ".join(f"typeof({e}), CASE typeof({e}) WHEN 'text' THEN CAST({e} AS BLOB) ELSE {e} END"
                         for e, _ in cols)
        try:
            return self._fetch_tuples(f"SELECT t.id, {ROW_HASH_TYPED_SQL}(:shape, {args}) {tail}", params)
        except sqlite3.DatabaseError as exc:
            raise unreadable(self.path, exc) from exc

    def _fetch_tuples(self, sql: str, params: Mapping[str, object]) -> list[tuple[int, str]]:
        cur = self._conn.cursor()
        cur.row_factory = None
        try:
            return cur.execute(sql, params).fetchall()
        finally:
            cur.close()

    def iter_rows(self, kind: Kind, batch: int, project: str | None = None) -> Iterator[list[SourceRow]]:
        """Every row of ``kind`` in batches (each its own short read)."""
        after = 0
        while True:
            rows = self.read_batch(kind, after, batch, project)
            if not rows:
                return
            yield rows
            after = rows[-1].id
            if len(rows) < batch:
                return

    def row_refs(self, kind: Kind) -> list[RowRef]:
        """(id, project, merged_into_project) of every row of ``kind``, for status."""
        table = TABLES[kind]
        _, join = self._row_columns(kind)
        if kind is Kind.PROMPT:
            sql = f"SELECT t.id AS id, s.project AS project, NULL AS merged FROM {table} t {join}"
        else:
            merged = "t.merged_into_project" if self.schema.column(table, "merged_into_project") else "NULL"
            sql = f"SELECT t.id AS id, t.project AS project, {merged} AS merged FROM {table} t"
        return [RowRef(int(r["id"]), r["project"] or "", r["merged"] or "") for r in self._fetch(sql, {})]

    def text_fingerprint(self, kind: Kind, columns: Sequence[str], after: int, up_to: int) -> tuple[int, int]:
        """(row count, sum of per-row hashes of id, the logical ``columns`` and the cells the text
        index filters on: ``FILTER_COLUMNS``, a prompt's session project) of the rows with
        after < id <= up_to: equal for two ranges only when (but for a 2^-32 chance) no row was
        added, deleted or edited. Both parts are sums, so a range's fingerprint is the sum of its
        pieces (the text index adds each appended range to what it had). Streams in SQLite: no
        row's text is held longer than its hash takes."""
        table = TABLES[kind]
        phys = [c for c in (self.schema.column(table, x) for x in columns) if c]
        # What the index filters on is part of what it holds: a project rewritten in place (claude-mem's
        # cwd remap), a merge, a type or a date changes the hash as an edited text does.
        filtered = [c for c in (self.schema.column(table, x) for x in FILTER_COLUMNS[kind]) if c]
        args = ", ".join(["CAST(t.id AS BLOB)", *(f'CAST(t."{c}" AS BLOB)' for c in (*phys, *filtered))])
        source = f"{table} t"
        if kind is Kind.PROMPT:  # a prompt's project is its session's
            args += ", CAST(s.project AS BLOB)"
        # Which rows are excluded is part of what the index holds (a blob, as every argument is).
        args += "".join(f", CAST({expr} AS BLOB)" for expr, _ in self._exclusion_columns(kind))
        if kind is Kind.PROMPT:  # its project and its exclusion are its session's
            source += " " + self._row_columns(kind)[1]
        row = self._fetch(f"SELECT count(*) AS n, coalesce(sum({FINGERPRINT_SQL}({args})), 0) AS h FROM {source} "
                          "WHERE t.id > :after AND t.id <= :up_to", {"after": after, "up_to": up_to})[0]
        return int(row["n"]), int(row["h"])

    def cjk_rows(self, kind: Kind, columns: Sequence[str], newest: int) -> tuple[int, int]:
        """(rows looked at, rows holding a Chinese, Japanese or Korean character in the logical
        ``columns``) among the ``newest`` rows of ``kind``: what the user writes now, at a bounded
        cost (a whole table's text is seconds at 100k rows)."""
        table = TABLES[kind]
        phys = [c for c in (self.schema.column(table, x) for x in columns) if c]
        if not phys:
            return 0, 0
        select = ", ".join(f't."{c}"' for c in phys)
        rows = self._fetch(f"SELECT {select} FROM {table} t ORDER BY t.id DESC LIMIT :newest", {"newest": newest})
        return len(rows), sum(1 for r in rows if any(isinstance(v, str) and cjk.has_cjk(v) for v in tuple(r)))

    def max_ids(self) -> dict[Kind, int]:
        """The highest id per kind (0 when empty): a cheap change check."""
        return {k: int(self._fetch(f"SELECT COALESCE(MAX(id), 0) AS m FROM {TABLES[k]}", {})[0]["m"]) for k in KINDS}

    def count_at_or_below(self, kind: Kind, up_to: int, since_ms: int | None = None) -> int:
        """Rows of ``kind`` with id <= ``up_to`` (and created at or after ``since_ms``)."""
        since = "" if since_ms is None else " AND created_at_epoch >= :since"
        rows = self._fetch(f"SELECT COUNT(*) AS n FROM {TABLES[kind]} WHERE id <= :up_to{since}",
                           {"up_to": up_to, "since": since_ms})
        return int(rows[0]["n"])

    def schema_version(self) -> int | None:
        """The highest migration claude-mem recorded in its ``schema_versions`` table (for the tested
        release: ``config.claude_mem.version.TESTED_SCHEMA_VERSION``); None for a file without that
        table (older files, or ones other tools wrote)."""
        has = self._fetch("SELECT 1 AS t FROM sqlite_master WHERE type = 'table' AND name = 'schema_versions'", {})
        if not has:
            return None
        value = self._fetch("SELECT MAX(version) AS v FROM schema_versions", {})[0]["v"]
        return int(value) if isinstance(value, int) else None

    def newest_at_or_below(self, kind: Kind, up_to: int) -> int | None:
        """created_at_epoch of the row of ``kind`` with the highest id at or below ``up_to`` (None
        when none): the date a newest-first pass reaches next in that kind (ids grow with time)."""
        rows = self._fetch(f"SELECT created_at_epoch AS e FROM {TABLES[kind]} WHERE id <= :up_to "
                           "ORDER BY id DESC LIMIT 1", {"up_to": up_to})
        value = rows[0]["e"] if rows else None
        return int(value) if isinstance(value, int) else None

    def oldest_after(self, kind: Kind, after_id: int) -> int | None:
        """created_at_epoch of the oldest row of ``kind`` with id > ``after_id`` (None when none)."""
        rows = self._fetch(f"SELECT MIN(created_at_epoch) AS m FROM {TABLES[kind]} WHERE id > :after",
                           {"after": after_id})
        value = rows[0]["m"] if rows else None
        return int(value) if isinstance(value, int) else None

    def _fetch(self, sql: str, params: Mapping[str, object]) -> list[sqlite3.Row]:
        try:
            return fetch_all(self._conn, sql, params)
        except sqlite3.DatabaseError as exc:
            raise unreadable(self.path, exc) from exc
