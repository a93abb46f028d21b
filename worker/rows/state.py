"""memsync's own sync records (what was written, kept apart from Chroma), in ``DATA_DIR/state.db``; never the source DB.

- ``docs``: one record per vector document of a collection generation: doc id, kind, source id,
  text hash, content hash, model, synced_at. A record with ``content_hash`` NULL is an *intent*:
  written before the upsert so that a crash between upsert and record still leaves a trace that
  a later run cleans up (no orphan can hide). The hash is set only after Chroma acknowledged.
- ``rows``: per source row: the hash of its values when all its documents were acknowledged,
  its project keys, and failure state (status ``failed``, reason, attempts).
- ``runs``: one line per finished resync, for status.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.formats.sync_records import STATE_DDL
from memsync.worker.process import logs

ACTIVE_COLLECTION = "active_collection"  # meta key: the generation resync last wrote
CHURN_PREFIX = "churn:"  # meta key prefix: vectors overwritten or deleted per collection
STORE_PREFIX = "store:"  # meta key prefix: identity of the collection a generation's records describe
AUDIT_PREFIX = "store_audit:"  # meta key prefix: when a generation's ids were last compared in full (ms)
DAMAGED_SUFFIX = ".damaged-"  # a state.db SQLite cannot read is moved aside as state.db.damaged-<ms>
SYNCED = "synced"
FAILED = "failed"


@dataclass(frozen=True, slots=True)
class DocRecord:
    """What the state knows of one document."""

    doc_id: str
    source_id: int
    text_hash: str | None
    content_hash: str | None


@dataclass(frozen=True, slots=True)
class RowRecord:
    """What the state knows of one source row."""

    source_id: int
    row_hash: str | None
    status: str
    project: str
    merged_into_project: str
    attempts: int
    docs: int


@dataclass(frozen=True, slots=True)
class RowSynced:
    """A row whose every document Chroma acknowledged: the hash of its values, its project keys and
    how many documents it has (``mark_rows``)."""

    source_id: int
    row_hash: str
    project: str
    merged_into_project: str
    docs: int


@dataclass(frozen=True, slots=True)
class RowFailed:
    """A row that could not be synced, and why (``mark_failed``); ``row_hash`` is None when its
    values could not be hashed."""

    source_id: int
    row_hash: str | None
    project: str
    merged_into_project: str
    reason: str


@dataclass(frozen=True, slots=True)
class RangeTotals:
    """What the records of one id range add up to; with ``settled_rows``, enough to tell that a
    range of unchanged rows needs nothing (``worker.pipeline.sync``)."""

    rows: int  # row records of the pass (in its project, when it has one)
    failed: int  # of those, rows recorded as failed
    docs: int  # documents of those rows that are synced
    synced_docs: int  # documents of every synced row in range, whatever its project
    doc_records: int  # document records in range (acknowledged or intent), whatever their project


def now_ms() -> int:
    """Wall-clock time in epoch milliseconds."""
    return int(time.time() * 1000)


def open_wal(path: Path, ddl: str, timeout_s: float = 30) -> sqlite3.Connection:
    """One of memsync's own SQLite files, in WAL mode (readers never wait for the one writer, and
    the worker and a resync may write in turn) with ``ddl`` applied; autocommit unless a
    transaction is begun, usable from the thread that writes beside the sync's."""
    conn = sqlite3.connect(str(path), timeout=timeout_s, isolation_level=None, check_same_thread=False)
    try:
        conn.executescript(ddl)  # first: pragmas that only a new file takes (auto_vacuum) come before WAL
        conn.execute("PRAGMA journal_mode=WAL")
        # A commit lost in a power cut is found again by the next pass: no fsync per commit.
        conn.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.Error:
        conn.close()
        raise
    return conn


HELD_SCHEMA = "held"
HELD_TABLE = f"{HELD_SCHEMA}.ids"
HELD_SUFFIX = ".held"  # state.db.held-<pid>: the scratch file of a check of the store, deleted after it


def _alive(pid: str) -> bool:
    """Whether the process of this pid (text from a file name) runs; False for what is not a pid."""
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True  # another user's process
    return True


class HeldIds:
    """The ids and content hashes a store holds, listed page by page into a scratch table of the
    records' own connection, and compared with the records there (:meth:`SyncState.held_ids`).

    Why a table on disk: a check of the whole store reads every id, and holding them and the
    records as two dicts of strings took 384 MB at its peak at 313k documents and kept 227 MB after
    a trim (small strings fragment the heap), on every worker start in a moved directory and at
    every daily audit. A scratch database attached beside the records holds them beyond its page
    cache of a few MB, and the comparisons are SQLite's joins."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __len__(self) -> int:
        return int(self._conn.execute(f"SELECT COUNT(*) FROM {HELD_TABLE}").fetchone()[0])

    def add(self, held: Sequence[tuple[str, str]]) -> None:
        """Ids the store holds, with their content hashes (an id listed again keeps its last hash)."""
        with self._conn:
            self._conn.execute("BEGIN")
            self._conn.executemany(f"INSERT OR REPLACE INTO {HELD_TABLE}(doc_id, content_hash) VALUES (?,?)", held)

    def discard(self, doc_ids: Sequence[str]) -> None:
        """Take ids off the list (the store deleted them)."""
        with self._conn:
            self._conn.execute("BEGIN")
            self._conn.executemany(f"DELETE FROM {HELD_TABLE} WHERE doc_id=?", [(d,) for d in doc_ids])

    def differing(self, collection: str) -> list[tuple[str, str, str | None]]:
        """(id, the store's hash, the record's hash or None) of each held document whose record is
        missing, an intent (no hash) or of another hash."""
        return [(str(d), str(h), None if r is None else str(r)) for d, h, r in self._conn.execute(
            f"SELECT h.doc_id, h.content_hash, d.content_hash FROM {HELD_TABLE} h LEFT JOIN docs d "
            "ON d.collection = ? AND d.doc_id = h.doc_id WHERE d.content_hash IS NOT h.content_hash", (collection,))]

    def lost(self, collection: str) -> list[str]:
        """Ids of acknowledged records the store does not hold."""
        return [str(r[0]) for r in self._conn.execute(
            f"SELECT doc_id FROM docs WHERE collection = ? AND content_hash IS NOT NULL "
            f"AND doc_id NOT IN (SELECT doc_id FROM {HELD_TABLE})", (collection,))]

    def absent(self, doc_ids: Sequence[str]) -> list[str]:
        """Which of ``doc_ids`` the store does not hold."""
        return [str(r[0]) for r in self._conn.execute(
            f"SELECT value FROM json_each(?) WHERE value NOT IN (SELECT doc_id FROM {HELD_TABLE})",
            (json.dumps(list(doc_ids)),))]


class SyncState:
    """The sync-record database. One writer at a time (SQLite's lock); short transactions."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.moved_aside: Path | None = None  # where a damaged file went (its records are rebuilt)
        try:
            self._conn = self._open(path)
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError):
                raise  # locked, read-only, no such directory: not damage, the file stays
            # Not a database (overwritten, truncated): the records are only a cache of what the
            # store holds, so they are rebuilt from the store's own ids and hashes (worker.pipeline.target).
            self.moved_aside = path.with_name(f"{path.name}{DAMAGED_SUFFIX}{now_ms()}")
            os.replace(path, self.moved_aside)
            for suffix in ("-wal", "-shm"):
                path.with_name(path.name + suffix).unlink(missing_ok=True)
            logs.get_logger().warning(logs.STATE_DAMAGED, path=str(path), moved_to=str(self.moved_aside),
                                      error=str(exc)[:200])
            self._conn = self._open(path)

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        return open_wal(path, STATE_DDL)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One write transaction, begun IMMEDIATE: SQLite's write lock is taken first (waiting up to
        the busy timeout), so two connections writing in turn (the sync thread's and its upsert
        thread's, the worker's and a resync's) never fail on a stale read snapshot."""
        with self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            yield

    def sibling(self) -> SyncState:
        """Another connection to the same records, for a thread that writes while this one reads:
        WAL gives each connection its own snapshot, and write transactions begin IMMEDIATE
        (:meth:`_writing`), so the two take turns on SQLite's lock instead of sharing a transaction."""
        other = type(self).__new__(type(self))  # a subclass (a test's) keeps its behaviour
        other.path, other.moved_aside, other._conn = self.path, None, self._open(self.path)
        return other

    def close(self) -> None:
        """Close the database."""
        self._conn.close()

    def __enter__(self) -> SyncState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reads ---------------------------------------------------------------------------------

    def docs_in_range(self, collection: str, kind: Kind, lo: int, hi: int) -> dict[str, DocRecord]:
        """Document records with lo < source_id <= hi."""
        cur = self._conn.execute(
            "SELECT doc_id, source_id, text_hash, content_hash FROM docs "
            "WHERE collection=? AND kind=? AND source_id > ? AND source_id <= ?",
            (collection, kind.value, lo, hi),
        )
        return {r[0]: DocRecord(*r) for r in cur}

    def rows_in_range(self, collection: str, kind: Kind, lo: int, hi: int) -> dict[int, RowRecord]:
        """Row records with lo < source_id <= hi."""
        cur = self._conn.execute(
            "SELECT source_id, row_hash, status, project, merged_into_project, attempts, docs FROM rows "
            "WHERE collection=? AND kind=? AND source_id > ? AND source_id <= ?",
            (collection, kind.value, lo, hi),
        )
        return {r[0]: RowRecord(*r) for r in cur}

    def count_rows_at_or_below(self, collection: str, kind: Kind, up_to: int) -> int:
        """How many row records have source_id <= ``up_to``."""
        row = self._conn.execute("SELECT COUNT(*) FROM rows WHERE collection=? AND kind=? AND source_id <= ?",
                                 (collection, kind.value, up_to)).fetchone()
        return int(row[0])

    def count_docs_in_range(self, collection: str, kind: Kind, lo: int, hi: int) -> int:
        """How many document records (acknowledged or intent) have lo < source_id <= hi."""
        row = self._conn.execute(
            "SELECT COUNT(*) FROM docs WHERE collection=? AND kind=? AND source_id > ? AND source_id <= ?",
            (collection, kind.value, lo, hi),
        ).fetchone()
        return int(row[0])

    def settled_rows(
        self, collection: str, kind: Kind, lo: int, hi: int, project: str | None, max_attempts: int
    ) -> list[tuple[int, str]]:
        """(source_id, row_hash) by source_id, lo < source_id <= hi, of the rows a pass has nothing to
        do for while their values keep this hash: synced, or failed ``max_attempts`` times; only the
        rows recorded in ``project`` (or merged into it) when one is given."""
        in_project = "" if project is None else " AND (project = :p OR merged_into_project = :p)"
        return self._conn.execute(
            "SELECT source_id, row_hash FROM rows WHERE collection = :c AND kind = :k AND source_id > :lo "
            "AND source_id <= :hi AND (status = :synced OR (status = :failed AND attempts >= :max))"
            f"{in_project} ORDER BY source_id",
            {"c": collection, "k": kind.value, "lo": lo, "hi": hi, "p": project, "synced": SYNCED, "failed": FAILED,
             "max": max_attempts},
        ).fetchall()

    def range_totals(self, collection: str, kind: Kind, lo: int, hi: int, project: str | None) -> RangeTotals:
        """Counts of the records with lo < source_id <= hi (see :class:`RangeTotals`), in one query."""
        in_project = "1" if project is None else "(project = :p OR merged_into_project = :p)"
        row = self._conn.execute(
            f"SELECT COALESCE(SUM({in_project}), 0), COALESCE(SUM({in_project} AND status = :failed), 0), "
            f"COALESCE(SUM(CASE WHEN {in_project} AND status = :synced THEN docs END), 0), "
            "COALESCE(SUM(CASE WHEN status = :synced THEN docs END), 0), "
            "(SELECT COUNT(*) FROM docs WHERE collection = :c AND kind = :k AND source_id > :lo AND source_id <= :hi) "
            "FROM rows WHERE collection = :c AND kind = :k AND source_id > :lo AND source_id <= :hi",
            {"c": collection, "k": kind.value, "lo": lo, "hi": hi, "p": project, "failed": FAILED,
             "synced": SYNCED},
        ).fetchone()
        return RangeTotals(*(int(x) for x in row))

    def doc_counts(self, collection: str) -> list[tuple[str, int, int, int | None]]:
        """(kind, source_id, synced documents, last synced_at) per row with acknowledged documents."""
        cur = self._conn.execute(
            "SELECT kind, source_id, COUNT(*), MAX(synced_at) FROM docs "
            "WHERE collection=? AND content_hash IS NOT NULL GROUP BY kind, source_id",
            (collection,),
        )
        return [(r[0], r[1], r[2], r[3]) for r in cur]

    def row_statuses(self, collection: str) -> list[tuple[str, int, str, str | None, int, int]]:
        """(kind, source_id, status, reason, attempts, updated_at) of every row record."""
        cur = self._conn.execute(
            "SELECT kind, source_id, status, reason, attempts, updated_at FROM rows WHERE collection=?",
            (collection,),
        )
        return [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in cur]

    def last_run(self, collection: str) -> tuple[int, str] | None:
        """(finished_at, summary JSON) of the newest resync of a collection."""
        row = self._conn.execute(
            "SELECT finished_at, summary FROM runs WHERE collection=? ORDER BY id DESC LIMIT 1", (collection,)
        ).fetchone()
        return (int(row[0]), str(row[1])) if row else None

    def watermarks(self, collection: str) -> dict[Kind, int]:
        """The highest source id with a row record, per kind: new rows are those above it. One MAX per
        kind is a lookup at the end of the primary key; a GROUP BY kind read every record (12 ms at
        87,414 rows, twice in every tail pass)."""
        out: dict[Kind, int] = {}
        for kind in KINDS:
            row = self._conn.execute("SELECT MAX(source_id) FROM rows WHERE collection=? AND kind=?",
                                     (collection, kind.value)).fetchone()
            if row[0] is not None:
                out[kind] = int(row[0])
        return out

    @contextlib.contextmanager
    def held_ids(self) -> Iterator[HeldIds]:
        """An empty list of what a store holds, to be compared with these records (:class:`HeldIds`);
        gone when the block ends."""
        # A scratch file beside the records, not SQLite's temporary directory: memsync writes only
        # in its data directory, and a full disk there is reported as such (config.diskspace).
        # One per process: a resync may check the store while the worker does.
        scratch = self.path.with_name(f"{self.path.name}{HELD_SUFFIX}-{os.getpid()}")
        for left in self.path.parent.glob(f"{self.path.name}{HELD_SUFFIX}-*"):
            if left == scratch or not _alive(left.name.rpartition("-")[2]):
                left.unlink(missing_ok=True)  # a crash's: nothing in it is needed
        self._conn.execute(f"ATTACH DATABASE ? AS {HELD_SCHEMA}", (str(scratch),))
        try:
            # Thrown away at the end: no journal, no fsync.
            self._conn.execute(f"PRAGMA {HELD_SCHEMA}.journal_mode=OFF")
            self._conn.execute(f"PRAGMA {HELD_SCHEMA}.synchronous=OFF")
            self._conn.execute(f"CREATE TABLE {HELD_TABLE}(doc_id TEXT PRIMARY KEY, content_hash TEXT NOT NULL) "
                               "WITHOUT ROWID")
            yield HeldIds(self._conn)
        finally:
            self._conn.execute(f"DETACH DATABASE {HELD_SCHEMA}")
            scratch.unlink(missing_ok=True)

    def text_hashes(self) -> Iterator[tuple[str, str]]:
        """(model, text hash) of every document record of every generation (repeated when several
        documents share a text): the texts whose vectors the embedding store keeps
        (``worker.stores.embedstore``)."""
        yield from self._conn.execute("SELECT model, text_hash FROM docs WHERE text_hash IS NOT NULL")

    def store_identity(self, collection: str) -> str | None:
        """The identity of the Chroma collection these records describe (None: not recorded yet)."""
        return self.get_meta(STORE_PREFIX + collection)

    def get_meta(self, key: str) -> str | None:
        """A value of memsync's own key/value table (e.g. the active collection)."""
        row = self._conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return str(row[0]) if row else None

    # -- writes --------------------------------------------------------------------------------

    def record_intents(self, collection: str, kind: Kind, docs: Iterable[tuple[str, int]], model: str) -> None:
        """Before an upsert: make sure every document has a record (new ones with no hash)."""
        with self._writing():
            self._conn.executemany(
                "INSERT OR IGNORE INTO docs(collection, doc_id, kind, source_id, model) VALUES (?,?,?,?,?)",
                [(collection, d, kind.value, s, model) for d, s in docs],
            )

    def record_synced(self, collection: str, kind: Kind, docs: Sequence[DocRecord], model: str) -> None:
        """After Chroma acknowledged: these documents (with their text and content hashes) are in the store."""
        ts = now_ms()
        with self._writing():
            self._conn.executemany(
                "INSERT INTO docs(collection, doc_id, kind, source_id, text_hash, content_hash, model, synced_at) "
                "VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(collection, doc_id) DO UPDATE SET "
                "text_hash=excluded.text_hash, content_hash=excluded.content_hash, model=excluded.model, "
                "synced_at=excluded.synced_at, source_id=excluded.source_id",
                [(collection, d.doc_id, kind.value, d.source_id, d.text_hash, d.content_hash, model, ts)
                 for d in docs],
            )

    def name_texts(self, collection: str, docs: Sequence[tuple[str, str]]) -> None:
        """Set the text hash of records that have none: (doc_id, text_hash) of documents whose
        content hash matched (so the text is the one the store holds)."""
        with self._writing():
            self._conn.executemany(
                "UPDATE docs SET text_hash=? WHERE collection=? AND doc_id=? AND text_hash IS NULL",
                [(th, collection, d) for d, th in docs],
            )

    def forget_docs(self, collection: str, doc_ids: Sequence[str]) -> None:
        """After Chroma deleted them: drop the records."""
        with self._writing():
            self._conn.executemany(
                "DELETE FROM docs WHERE collection=? AND doc_id=?", [(collection, d) for d in doc_ids]
            )

    def mark_rows(self, collection: str, kind: Kind, rows: Sequence[RowSynced]) -> None:
        """Rows whose every document is acknowledged."""
        ts = now_ms()
        with self._writing():
            self._conn.executemany(
                "INSERT INTO rows(collection, kind, source_id, project, merged_into_project, row_hash, status, "
                "docs, reason, attempts, updated_at) VALUES (?,?,?,?,?,?,?,?,NULL,0,?) "
                "ON CONFLICT(collection, kind, source_id) DO UPDATE SET project=excluded.project, "
                "merged_into_project=excluded.merged_into_project, row_hash=excluded.row_hash, "
                "status=excluded.status, docs=excluded.docs, reason=NULL, attempts=0, updated_at=excluded.updated_at",
                [(collection, kind.value, r.source_id, r.project, r.merged_into_project, r.row_hash, SYNCED,
                  r.docs, ts) for r in rows],
            )

    def mark_failed(self, collection: str, kind: Kind, rows: Sequence[RowFailed]) -> None:
        """Rows that could not be synced; attempts += 1."""
        ts = now_ms()
        with self._writing():
            self._conn.executemany(
                "INSERT INTO rows(collection, kind, source_id, project, merged_into_project, row_hash, status, "
                "docs, reason, attempts, updated_at) VALUES (?,?,?,?,?,?,?,0,?,1,?) "
                "ON CONFLICT(collection, kind, source_id) DO UPDATE SET project=excluded.project, "
                "merged_into_project=excluded.merged_into_project, row_hash=excluded.row_hash, "
                "status=excluded.status, reason=excluded.reason, attempts=rows.attempts+1, "
                "updated_at=excluded.updated_at",
                [(collection, kind.value, r.source_id, r.project, r.merged_into_project, r.row_hash, FAILED,
                  r.reason, ts) for r in rows],
            )

    def forget_rows(self, collection: str, kind: Kind, source_ids: Sequence[int]) -> None:
        """Rows gone from the source (their documents were deleted first)."""
        with self._writing():
            self._conn.executemany(
                "DELETE FROM rows WHERE collection=? AND kind=? AND source_id=?",
                [(collection, kind.value, s) for s in source_ids],
            )

    def adopt_docs(self, collection: str, docs: Sequence[tuple[str, Kind, int, str]], model: str) -> None:
        """Documents the store holds, with the store's content hash: (doc_id, kind, source_id,
        content_hash). No text hash: a document whose hash then differs is embedded again."""
        ts = now_ms()
        with self._writing():
            self._conn.executemany(
                "INSERT INTO docs(collection, doc_id, kind, source_id, text_hash, content_hash, model, synced_at) "
                "VALUES (?,?,?,?,NULL,?,?,?) ON CONFLICT(collection, doc_id) DO UPDATE SET text_hash=NULL, "
                "content_hash=excluded.content_hash, synced_at=excluded.synced_at, source_id=excluded.source_id",
                [(collection, d, k.value, s, ch, model, ts) for d, k, s, ch in docs],
            )

    def forget_row_records(self, collection: str, rows: Iterable[tuple[Kind, int]]) -> None:
        """Drop row records (not their document records), so the next full pass derives these rows
        again and compares each document with its record."""
        with self._writing():
            self._conn.executemany(
                "DELETE FROM rows WHERE collection=? AND kind=? AND source_id=?",
                [(collection, k.value, s) for k, s in rows],
            )

    def forget_all_rows(self, collection: str) -> None:
        """Drop every row record of a collection (not its document records): the next pass derives
        every row again and writes only the documents that differ from their records."""
        with self._writing():
            self._conn.execute("DELETE FROM rows WHERE collection=?", (collection,))

    def bind_store(self, collection: str, identity: str, audited_at_ms: int | None = None) -> None:
        """Record which Chroma collection (identity) these records describe, and when they were last
        compared with it in full."""
        with self._writing():
            self._conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                               (STORE_PREFIX + collection, identity))
            if audited_at_ms is not None:
                self._conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                                   (AUDIT_PREFIX + collection, str(audited_at_ms)))

    def audited_at(self, collection: str) -> int:
        """When a collection's ids were last compared in full with the records (0: never)."""
        return int(self.get_meta(AUDIT_PREFIX + collection) or 0)

    def set_meta(self, key: str, value: str) -> None:
        """Set a value of the key/value table."""
        with self._writing():
            self._conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    def add_churn(self, collection: str, documents: int) -> None:
        """Count vectors overwritten or deleted in a collection (Chroma keeps their space until the
        collection is rebuilt; see worker.stores.compact)."""
        if documents > 0:
            with self._writing():
                self._conn.execute(
                    "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET "
                    "value = CAST(value AS INTEGER) + excluded.value", (CHURN_PREFIX + collection, documents))

    def churn(self, collection: str) -> int:
        """Vectors overwritten or deleted since the collection was built."""
        return int(self.get_meta(CHURN_PREFIX + collection) or 0)

    def live_docs(self, collection: str) -> int:
        """Documents Chroma acknowledged in a collection."""
        row = self._conn.execute("SELECT COUNT(*) FROM docs WHERE collection=? AND content_hash IS NOT NULL",
                                 (collection,)).fetchone()
        return int(row[0])

    def acknowledged_ids(self, collection: str) -> list[str]:
        """Ids of the documents Chroma acknowledged in a collection, sorted."""
        return [r[0] for r in self._conn.execute(
            "SELECT doc_id FROM docs WHERE collection=? AND content_hash IS NOT NULL ORDER BY doc_id", (collection,))]

    def copy_records(self, source: str, target: str) -> None:
        """Make ``target``'s records an exact copy of ``source``'s (docs and rows), in one transaction."""
        with self._writing():
            for table in ("docs", "rows"):
                cols = [r[1] for r in self._conn.execute(f"PRAGMA table_info({table})") if r[1] != "collection"]
                listed = ", ".join(cols)
                self._conn.execute(f"DELETE FROM {table} WHERE collection=?", (target,))
                self._conn.execute(f"INSERT INTO {table}(collection, {listed}) SELECT ?, {listed} FROM {table} "
                                   "WHERE collection=?", (target, source))

    def record_run(self, collection: str, started_at: int, summary: str) -> None:
        """Remember a finished resync."""
        with self._writing():
            self._conn.execute(
                "INSERT INTO runs(collection, started_at, finished_at, summary) VALUES (?,?,?,?)",
                (collection, started_at, now_ms(), summary),
            )

    def drop_collection(self, collection: str) -> None:
        """Forget every record of a collection generation (after a rebuild replaced it)."""
        with self._writing():
            for table in ("docs", "rows", "runs"):
                self._conn.execute(f"DELETE FROM {table} WHERE collection=?", (collection,))
            for prefix in (CHURN_PREFIX, STORE_PREFIX, AUDIT_PREFIX):
                self._conn.execute("DELETE FROM meta WHERE key=?", (prefix + collection,))
