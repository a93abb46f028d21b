"""Cheap change detection for the tail loop: file identity and sizes first (no SQL), then the
highest id per kind. Also the lag: age of the oldest row not yet synced."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from memsync.config.claude_mem.projects import exclusion
from memsync.config.claude_mem.schema import KINDS, Kind, SchemaError
from memsync.config.errors import SourceUnavailable
from memsync.worker.process import logs
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.state import SyncState


@dataclass(frozen=True, slots=True)
class FileStamp:
    """Identity and state of the database files; equal stamps mean nothing was written."""

    inode: int
    db: tuple[int, int]
    wal: tuple[int, int]


def stamp(db: Path) -> FileStamp | None:
    """The current stamp, or None when the database file is missing."""
    try:
        st = os.stat(db)
    except FileNotFoundError:
        return None
    try:
        wst = os.stat(f"{db}-wal")
        wal = (wst.st_size, wst.st_mtime_ns)
    except FileNotFoundError:
        wal = (0, 0)
    return FileStamp(st.st_ino, (st.st_size, st.st_mtime_ns), wal)


def oldest_pending_ms(reader: SourceReader, above: dict[Kind, int]) -> int | None:
    """created_at_epoch of the oldest row above the watermarks, or None when there is none."""
    values = [v for kind, after in above.items() if (v := reader.oldest_after(kind, after)) is not None]
    return min(values) if values else None


def pending_rows(reader: SourceReader, state: SyncState, collection: str, below: bool = True) -> int:
    """Rows the records do not cover yet: those above the watermarks, and with ``below`` (a full
    pass goes newest first: a first sync under way) the rows at or below them that have no record,
    counted as the rows there less the records there (a row deleted and not yet passed keeps its
    record, so this is a floor; ``memsync status`` counts row by row)."""
    marks, max_ids = state.watermarks(collection), reader.max_ids()
    pending = 0
    for kind in KINDS:
        mark = marks.get(kind, 0)
        pending += max(0, max_ids[kind] - mark)
        if below:
            pending += unrecorded_below(reader, state, collection, kind, mark)
    return pending


def unrecorded_below(reader: SourceReader, state: SyncState, collection: str, kind: Kind, mark: int) -> int:
    """Rows of ``kind`` at or below the records' watermark ``mark`` that have no record: the rows
    there less the records there (two COUNTs; a row deleted and not yet passed keeps its record,
    so this is a floor). A newest-first first sync leaves such rows until it has passed them."""
    if not mark:
        return 0
    return max(0, reader.count_at_or_below(kind, mark) - state.count_rows_at_or_below(collection, kind, mark))


class SourceTail:
    """The agent's database as the worker loop follows it: the open reader, the files' last stamp
    and the highest ids seen. A database found replaced (another file, or ids that went down) logs
    ``database_replaced`` and asks for a reconcile."""

    def __init__(self, db: Path, busy_timeout_ms: int, reconcile_due: threading.Event,
                 excluded_projects: str = "") -> None:
        self.db = db
        self.busy_timeout_ms = busy_timeout_ms
        # memsync's own excluded_projects; claude-mem's may change while the worker runs (its
        # settings file, read again at every look): see ``changed``.
        self.excluded_projects = excluded_projects
        self.exclusion = exclusion(excluded_projects)
        self.reconcile_due = reconcile_due  # set when ids went down (the caller runs the full pass)
        self.reader: SourceReader | None = None
        self.settled = False  # the stamp was the same at the last two looks: its commits are visible
        self.log = logs.get_logger(component="worker")
        self._stamp: FileStamp | None = None
        self._max_seen: dict[Kind, int] = {}
        # The last look of rows_waiting (a full pass's, between its ranges), apart from changed()'s:
        # a full pass that looked must not hide the change from the step's tail pass.
        self._waiting_stamp: FileStamp | None = None
        self._waiting_settled = False
        self._inode: int | None = None  # the identity of the file the reader opened
        self._known_good = False  # a claude-mem database was read here since start-up
        self._lost = False  # the file could not be read since the reader was last open

    def open(self) -> SourceReader:
        """The reader, opened when there is none (then the next look starts from no stamp).

        Opened again after the file could not be read (the reader was closed by the worker's
        degraded step), it asks for a reconcile: the file that came back may be another one."""
        if self.reader is None:
            self.reader = self._new_reader()
            if self._lost:
                self.log.info("database_readable_again")
                self.reconcile_due.set()
            self._stamp, self._lost = None, False
        return self.reader

    def close(self) -> None:
        """Close the reader (the next ``open`` opens the file again)."""
        if self.reader is not None:
            self.reader.close()
            self.reader = None

    def lost(self) -> None:
        """The file could not be read: close the reader; the next ``open`` reconciles."""
        self.close()
        self._lost = self._known_good

    def _reopen(self) -> SourceReader:
        self.close()
        self.reader = self._new_reader()
        return self.reader

    def _new_reader(self) -> SourceReader:
        """A reader of the file as it is now. A database that stopped being claude-mem's
        while the worker runs (truncated, or replaced by another program's SQLite file) is a
        degraded state the worker waits out, not a setup error: a file that was good once is
        likely to come back (a restore, the agent recreating it). At start-up it stays a
        ConfigError-like SchemaError (exit 2): the setting names the wrong file."""
        # The file's identity before it is opened: replaced in between, the next look sees another
        # inode and reads it again (the other order could keep reading a deleted file unnoticed).
        before = stamp(self.db)
        try:
            reader = SourceReader(self.db, self.busy_timeout_ms, self.exclusion)
        except SchemaError as exc:
            if not self._known_good:
                raise
            raise SourceUnavailable(f"source database {self.db} changed under the worker: {exc}; "
                                    "waiting for a claude-mem database there") from exc
        self._known_good = True
        self._inode = before.inode if before is not None else None
        return reader

    def replaced(self) -> bool:
        """True when the database file is another one than before (restored from backup, swapped)."""
        current = stamp(self.db)
        if current is None:
            raise SourceUnavailable(f"source database not found: {self.db}")
        if self._inode is not None and current.inode != self._inode:
            self.log.warning("database_replaced", reason="file identity changed")
            self._reopen()
            self._stamp, self._max_seen = None, {}
            return True
        return False

    def exclusion_changed(self) -> bool:
        """True (and the reconcile asked for) when the excluded projects changed since the last
        look: claude-mem's setting (its file is re-read when it changes) or memsync's. Rows of a
        newly excluded project lose their documents and those of a project no longer excluded get
        theirs; every row's hash changes with the setting, so it takes a full pass."""
        now_excluded = exclusion(self.excluded_projects)
        if now_excluded.patterns == self.exclusion.patterns:
            return False
        self.log.info("excluded_projects_changed", patterns=list(now_excluded.patterns),
                      ignored=list(now_excluded.ignored))
        self.exclusion = now_excluded
        if self.reader is not None:
            self._reopen()
        self.reconcile_due.set()
        return True

    def rows_waiting(self, state: SyncState, collection: str) -> bool:
        """Whether rows were committed above ``collection``'s watermarks: a full pass asks between
        its ranges, to let them go first (``worker.pipeline.sync``). The file stamp first (no SQL while it
        stays, once a look saw it stable: its commits are visible); never for a snapshot, whose
        reader a look would have to open again under the running pass."""
        reader = self.reader
        if reader is None or reader.immutable:
            return False
        current = stamp(self.db)
        if current == self._waiting_stamp and self._waiting_settled:
            return False
        self._waiting_settled = current == self._waiting_stamp
        self._waiting_stamp = current
        max_ids = reader.max_ids()
        marks = state.watermarks(collection)
        return any(max_ids[k] > marks.get(k, 0) for k in KINDS)

    def changed(self, state: SyncState, collection: str, pending: bool) -> bool:
        """Cheap check first (file stamp, no SQL); then max ids against ``collection``'s watermarks.
        True when a tail pass is due; ``pending``: rows are known to wait above the watermarks."""
        current = stamp(self.db)
        if current is not None and current == self._stamp and self.settled and not pending:
            return False
        # The WAL file changes before its commit is visible to readers, so a changed stamp gets a
        # second look at the next check, once it is stable; only then is it trusted.
        self.settled = current == self._stamp
        assert self.reader is not None
        reader = self.reader
        if reader.immutable and current != self._stamp:
            # An immutable snapshot does not see later writes: read the file as it is now.
            reader = self._reopen()
        self._stamp = current
        max_ids = reader.max_ids()
        shrunk = [k.value for k in KINDS if max_ids[k] < self._max_seen.get(k, 0)]
        self._max_seen = max_ids
        if shrunk:
            self.log.warning("database_replaced", reason="max id went down", kinds=shrunk)
            self.reconcile_due.set()
            return True
        marks = state.watermarks(collection)
        return any(max_ids[k] > marks.get(k, 0) for k in KINDS)
