"""Reading the agent's database: bounded batches by id, short read transactions, both schema eras.

Each read fetches one batch completely (so its read transaction ends) before anything is embedded:
a long-open read would stop the app's WAL checkpoints. The connection is ``mode=ro``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from memsync.config.claude_mem.connection import fetch_all, open_source_db
from memsync.config.claude_mem.schema import KINDS, SESSIONS_TABLE, TABLES, Kind, SchemaError, SourceSchema, detect
from memsync.config.errors import SourceUnavailable
from memsync.config.formats.text_index import fingerprint_hash
from memsync.worker.documents import SourceRow

FINGERPRINT_SQL = "memsync_fingerprint_hash"  # the SQL function text_fingerprint sums


@dataclass(frozen=True, slots=True)
class RowRef:
    """A row's id and project keys, for status counts."""

    id: int
    project: str
    merged_into_project: str


class SourceReader:
    """Reads claude-mem rows in logical column names, whatever the era of the file."""

    def __init__(self, path: Path, busy_timeout_ms: int = 5000) -> None:
        self.path = path
        self._conn = open_source_db(path, busy_timeout_ms)
        self.immutable = self._conn.immutable  # a snapshot: reopen when the file changes
        self._conn.create_function(FINGERPRINT_SQL, -1, fingerprint_hash, deterministic=True)
        try:
            self.schema: SourceSchema = detect(self._conn)
        except SchemaError:
            self._conn.close()
            raise

    def close(self) -> None:
        """Close the read-only connection."""
        self._conn.close()

    def __enter__(self) -> SourceReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _session_join(self, kind: Kind, alias: str) -> tuple[str, str]:
        """(extra select columns, JOIN clause) for the session a row belongs to."""
        sch = self.schema
        platform = sch.column(SESSIONS_TABLE, "platform_source")
        plat_sql = f's."{platform}" AS platform_source' if platform else "NULL AS platform_source"
        join = f"LEFT JOIN {SESSIONS_TABLE} s ON {sch.session_match(kind, alias, 's')}"
        if kind is Kind.PROMPT:
            sess_ms = sch.column(SESSIONS_TABLE, "memory_session_id")
            ms = f's."{sess_ms}" AS memory_session_id' if sess_ms else "NULL AS memory_session_id"
            return f"{plat_sql}, s.project AS project, {ms}, NULL AS merged_into_project", join
        return plat_sql, join

    def _project_clause(self, kind: Kind, alias: str) -> str:
        if kind is Kind.PROMPT:
            return "s.project = :project"
        if self.schema.column(TABLES[kind], "merged_into_project"):
            return f"({alias}.project = :project OR {alias}.merged_into_project = :project)"
        return f"{alias}.project = :project"

    def read_batch(self, kind: Kind, after_id: int, limit: int, project: str | None = None) -> list[SourceRow]:
        """Rows of ``kind`` with id > ``after_id``, by id, at most ``limit``; fully fetched (the read
        transaction is over when this returns)."""
        table = TABLES[kind]
        extra, join = self._session_join(kind, "t")
        select = self.schema.select_list(table, "t")
        where = "t.id > :after"
        if project is not None:
            where += " AND " + self._project_clause(kind, "t")
        sql = f"SELECT {select}, {extra} FROM {table} t {join} WHERE {where} ORDER BY t.id LIMIT :limit"
        params = {"after": after_id, "limit": limit, "project": project}
        rows = self._fetch(sql, params)
        return [SourceRow(kind, int(r["id"]), dict(r)) for r in rows]

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
        _, join = self._session_join(kind, "t")
        if kind is Kind.PROMPT:
            sql = f"SELECT t.id AS id, s.project AS project, NULL AS merged FROM {table} t {join}"
        else:
            merged = "t.merged_into_project" if self.schema.column(table, "merged_into_project") else "NULL"
            sql = f"SELECT t.id AS id, t.project AS project, {merged} AS merged FROM {table} t"
        return [RowRef(int(r["id"]), r["project"] or "", r["merged"] or "") for r in self._fetch(sql, {})]

    def text_fingerprint(self, kind: Kind, columns: Sequence[str], after: int, up_to: int) -> tuple[int, int]:
        """(row count, sum of per-row hashes of id and the logical ``columns``) of the rows with
        after < id <= up_to: equal for two ranges only when (but for a 2^-32 chance) no row was
        added, deleted or edited. Both parts are sums, so a range's fingerprint is the sum of its
        pieces (the text index adds each appended range to what it had). Streams in SQLite: no
        row's text is held longer than its hash takes."""
        table = TABLES[kind]
        phys = [c for c in (self.schema.column(table, x) for x in columns) if c]
        args = ", ".join(["CAST(t.id AS BLOB)", *(f'CAST(t."{c}" AS BLOB)' for c in phys)])
        row = self._fetch(f"SELECT count(*) AS n, coalesce(sum({FINGERPRINT_SQL}({args})), 0) AS h FROM {table} t "
                          "WHERE t.id > :after AND t.id <= :up_to", {"after": after, "up_to": up_to})[0]
        return int(row["n"]), int(row["h"])

    def max_ids(self) -> dict[Kind, int]:
        """The highest id per kind (0 when empty): a cheap change check."""
        return {k: int(self._fetch(f"SELECT COALESCE(MAX(id), 0) AS m FROM {TABLES[k]}", {})[0]["m"]) for k in KINDS}

    def oldest_after(self, kind: Kind, after_id: int) -> int | None:
        """created_at_epoch of the oldest row of ``kind`` with id > ``after_id`` (None when none)."""
        rows = self._fetch(f"SELECT MIN(created_at_epoch) AS m FROM {TABLES[kind]} WHERE id > :after",
                           {"after": after_id})
        value = rows[0]["m"] if rows else None
        return int(value) if isinstance(value, int) else None

    def _fetch(self, sql: str, params: Mapping[str, object]) -> list[sqlite3.Row]:
        try:
            return fetch_all(self._conn, sql, params)
        except sqlite3.OperationalError as exc:
            raise SourceUnavailable(f"reading {self.path}: {exc}") from exc
