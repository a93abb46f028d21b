"""Opening the agent's database: read-only, with a busy timeout, never written.

A polite guest (claude-mem notes, "Connection"): ``mode=ro`` URI so no code path can write,
short read transactions (callers fetch a bounded batch and close), busy timeout so a writer's
lock is waited for rather than failed on.

A WAL-mode database in a directory memsync cannot write (a read-only mount, another user's
directory) cannot be opened ``mode=ro`` while its ``-wal``/``-shm`` files do not exist: SQLite
would have to create them. Then the file holds every committed row (no WAL means fully
checkpointed) and is opened as an immutable snapshot; the connection says so (``immutable``), and
long-lived readers reopen when the file changes.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

from memsync.config.errors import SourceUnavailable


def fetch_all(conn: sqlite3.Connection, sql: str, params: object = ()) -> list[sqlite3.Row]:
    """Run a query and fetch every row. Text that is not valid UTF-8 makes sqlite3's fast C decoder
    fail the whole query; then the query is rerun with a forgiving decoder (replacement characters),
    so one bad row never stops a batch and good rows pay nothing for it."""
    try:
        return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]
    except sqlite3.OperationalError as exc:
        if "decode" not in str(exc):
            raise
    conn.text_factory = decode_text
    try:
        return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]
    finally:
        conn.text_factory = str


class SourceConnection(sqlite3.Connection):
    """A read-only connection to the agent's database; ``immutable`` when opened as a snapshot."""

    immutable: bool = False


def _connect(uri: str, busy_timeout_ms: int) -> SourceConnection:
    conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout_ms / 1000, check_same_thread=False,
                           factory=SourceConnection)
    try:
        conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        conn.execute("PRAGMA query_only=ON")
        conn.row_factory = sqlite3.Row
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.Error:
        conn.close()
        raise
    return conn


def snapshot_only(path: Path) -> bool:
    """True when SQLite cannot make the WAL side files beside ``path`` and none exist, so the only
    way to read it is as an immutable snapshot (see the module docstring)."""
    return not os.access(path.parent, os.W_OK) and not os.path.exists(f"{path}-wal")


def open_source_db(path: Path, busy_timeout_ms: int = 5000) -> SourceConnection:
    """A read-only connection to the source database; raises SourceUnavailable when missing/unreadable."""
    if not path.exists():
        raise SourceUnavailable(f"source database not found: {path}")
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    try:
        return _connect(uri, busy_timeout_ms)
    except sqlite3.Error as exc:
        if not (isinstance(exc, sqlite3.OperationalError) and snapshot_only(path)):
            raise SourceUnavailable(f"cannot read source database {path}: {exc}") from exc
    try:
        conn = _connect(uri + "&immutable=1", busy_timeout_ms)
    except sqlite3.Error as exc:
        raise SourceUnavailable(f"cannot read source database {path}: {exc}") from exc
    conn.immutable = True
    return conn


def unreadable(path: Path, exc: sqlite3.DatabaseError) -> SourceUnavailable:
    """The error to raise when a read of the source database failed: SourceUnavailable (retry with
    backoff) for a file that is locked, damaged (``database disk image is malformed``), replaced by
    bytes that are not SQLite (``file is not a database``) or missing a table it had. A
    ProgrammingError is a fault in memsync's own SQL, not the file's: it is re-raised as it is."""
    if isinstance(exc, sqlite3.ProgrammingError):
        raise exc
    return SourceUnavailable(f"cannot read source database {path}: {exc}")


def decode_text(raw: bytes) -> str:
    """Text columns may hold bytes that are not UTF-8; keep what is readable instead of failing."""
    return raw.decode("utf-8", errors="replace")
