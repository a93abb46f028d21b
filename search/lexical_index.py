"""memsync's own FTS5 index, for databases that have no FTS tables (older files, or SQLite built
without FTS5 when the app created them). Lives in ``DATA_DIR/lexical.db``; the agent's database is
only read. Read with the same calls as the app's tables (``search.app_fts``); ``search.lexical``
decides which one answers.

Porter tokenizer (the better of the two on the LoCoMo dev set: BM25 recall@10 0.610 vs 0.586),
over text whose CJK runs are cut into characters and bigrams (``config.cjk``): so it also answers
the CJK words of a query when the app's tables do have FTS5, whose ``unicode61`` cannot find them.
Kept current on use: when the database files changed since the last look, each table's
fingerprint (row count, max id, total text length) is compared; only-new rows are appended, any
other change rebuilds that table's index. A file lock serialises refreshes across processes. An
index of another ``FORMAT`` (how its text is cut) is rebuilt whole once.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
from pathlib import Path

from memsync.config import cjk
from memsync.config.claude_mem.schema import FTS_TABLES, KINDS, TABLES, Kind
from memsync.config.settings import Settings
from memsync.search import fts
from memsync.search.models import Order, Scope
from memsync.search.sql import ALIAS, SourceRows

INDEX_FILE = "lexical.db"
FORMAT = 2  # 2: CJK runs as characters and bigrams (1, unversioned: as one word each)
_last_stamp: dict[str, tuple[float, ...]] = {}
_stamp_lock = threading.Lock()


def _stamp(db: Path) -> tuple[float, ...]:
    out: list[float] = []
    for p in (db, Path(str(db) + "-wal")):
        try:
            st = os.stat(p)
            out.extend((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.extend((0, 0, 0))
    return tuple(out)


class LexicalIndex:
    """Read side: BM25 matches by kind, filtered by the source rows. Build side: :meth:`refreshed`."""

    def __init__(self, path: Path, rows: SourceRows) -> None:
        self.path = path
        self.rows = rows
        self._conn: sqlite3.Connection | None = None  # opened by the first match, kept for the search

    def close(self) -> None:
        """Release the index's connection (a search asks it for each kind: rank, tail, count)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @classmethod
    def refreshed(cls, settings: Settings, rows: SourceRows) -> LexicalIndex:
        """The index, brought up to date with the source if its files changed since last time."""
        path = settings.data_dir / INDEX_FILE
        stamp = _stamp(settings.db)
        with _stamp_lock:
            if _last_stamp.get(str(path)) == stamp and path.exists():
                return cls(path, rows)
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        with open(settings.data_dir / (INDEX_FILE + ".lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                conn = sqlite3.connect(str(path), timeout=30)
                try:
                    _refresh(conn, rows)
                finally:
                    conn.close()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        with _stamp_lock:
            _last_stamp[str(path)] = stamp
        return cls(path, rows)

    @staticmethod
    def expression(kind: Kind, text: str) -> str | None:
        """The MATCH expression for ``text``: its content words OR-ed (the porter tokenizer stems
        them itself), or None when it has none. The same on every table."""
        words = fts.tokens(text)
        return fts.expression_for([(w,) for w in words]) if words else None

    def match(self, kind: Kind, expr: str, limit: int | None = None, after_id: int = 0) -> list[tuple[int, float]]:
        """(id, score) best first for a MATCH expression (higher = better), of the rows with an id
        above ``after_id`` (FTS5 applies a rowid bound inside the match: the text index's tail ranks
        only the newest rows, not the whole table)."""
        if self._conn is None:
            self._conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30)
        conn = self._conn
        try:
            table = _index_table(kind)
            sql = f"SELECT rowid, rank FROM {table} WHERE {table} MATCH ? AND rowid > ? ORDER BY rank"
            params: list[object] = [expr, after_id]
            if limit is not None:
                sql += " LIMIT ?"
                params.append(limit)
            return [(int(r[0]), -float(r[1])) for r in conn.execute(sql, params)]
        except sqlite3.OperationalError:
            return []

    def ranked(self, kind: Kind, expr: str, scope: Scope, limit: int,
               order: Order = Order.RELEVANCE) -> list[tuple[int, float]]:
        """Like ``AppFts.ranked``: every match, then the scope applied by the source rows (this
        index holds text only), best (or newest/oldest) first."""
        if not self.rows.applicable(kind, scope.filters):
            return []
        matches = self.match(kind, expr, after_id=scope.after_id)
        if not matches:
            return []
        keep = self.rows.passing(kind, [i for i, _ in matches], scope.filters, scope.window)
        out = [(i, s) for i, s in matches if i in keep]
        if order is not Order.RELEVANCE:
            epochs = self.rows.epochs(kind, [i for i, _ in out])
            out.sort(key=lambda x: (epochs.get(x[0], 0), x[0]), reverse=order is Order.NEWEST)
        return out[:limit]

    def count(self, kind: Kind, expr: str, scope: Scope, cap: int) -> int:
        """How many rows match within the scope, up to ``cap``."""
        return len(self.ranked(kind, expr, scope, cap))


def _index_table(kind: Kind) -> str:
    return f"idx_{TABLES[kind]}"


def _text_columns(rows: SourceRows, kind: Kind) -> list[str]:
    return [c for c in FTS_TABLES[kind][1] if rows.schema.column(TABLES[kind], c)]


def _refresh(conn: sqlite3.Connection, rows: SourceRows) -> None:
    if conn.execute("PRAGMA user_version").fetchone()[0] != FORMAT:
        with conn:  # another format (or a new file): every table is filled again below
            conn.execute("DROP TABLE IF EXISTS fingerprint")
            for kind in KINDS:
                conn.execute(f"DROP TABLE IF EXISTS {_index_table(kind)}")
            conn.execute(f"PRAGMA user_version = {FORMAT}")
    conn.execute("CREATE TABLE IF NOT EXISTS fingerprint (kind TEXT PRIMARY KEY, n INTEGER, max_id INTEGER, "
                 "chars INTEGER)")
    for kind in KINDS:
        cols = _text_columns(rows, kind)
        table = _index_table(kind)
        conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING fts5({', '.join(cols)}, "
                     "tokenize='porter unicode61')")
        lengths = " + ".join(f"coalesce(length({ALIAS}.\"{rows.schema.column(TABLES[kind], c)}\"), 0)" for c in cols)
        n, max_id, chars = rows.query(
            f"SELECT count(*), coalesce(max({ALIAS}.id), 0), coalesce(sum({lengths}), 0) FROM {TABLES[kind]} {ALIAS}"
        )[0]
        old = conn.execute("SELECT n, max_id, chars FROM fingerprint WHERE kind = ?", (kind.value,)).fetchone()
        if old == (n, max_id, chars):
            continue
        select = ", ".join(f"{ALIAS}.\"{rows.schema.column(TABLES[kind], c)}\"" for c in cols)
        if old is not None and max_id > old[1]:
            new = rows.query(f"SELECT {ALIAS}.id, {select} FROM {TABLES[kind]} {ALIAS} WHERE {ALIAS}.id > ?", [old[1]])
            appended_only = old[0] + len(new) == n and old[2] + sum(len(str(v or "")) for r in new for v in
                                                                      list(r)[1:]) == chars
        else:
            new, appended_only = [], False
        with conn:
            if not appended_only:
                conn.execute(f"DELETE FROM {table}")
                new = rows.query(f"SELECT {ALIAS}.id, {select} FROM {TABLES[kind]} {ALIAS}")
            conn.executemany(
                f"INSERT INTO {table}(rowid, {', '.join(cols)}) VALUES (?, {', '.join('?' * len(cols))})",
                [(r[0], *(cjk.index_form(v) if isinstance(v, str) else v for v in list(r)[1:])) for r in new],
            )
            conn.execute("INSERT OR REPLACE INTO fingerprint VALUES (?, ?, ?, ?)", (kind.value, n, max_id, chars))
