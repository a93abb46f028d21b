"""Keeping memsync's text index (layout: ``config.formats.text_index``; read by ``search.textindex``) in step
with the agent's database.

The daemon calls :meth:`TextSync.step` on every loop, Chroma up or down: the index is what keeps
the lexical fallback fast while Chroma is away. New rows are appended when the database file
changed, at most every ``text_index_append_s`` (searches read newer rows from FTS5); each
table's fingerprint (row count, sum of per-row text hashes) is compared at start-up and once per
reconcile interval, and a kind whose older rows were edited or deleted is rebuilt. The index is an
accelerator, so nothing about it may stop the sync: failures are logged (once per distinct
message) and retried at the next change.

A damaged index (``config.formats.text_index.unreadable``: a ``meta.json`` damaged or gone, a
segment file missing or garbled, an index that disagrees with the commit memsync recorded) is
checked for when the writer opens and at every step: memsync's record and the checksums of the
files that changed since the last look (a stat per file), everything with a query over every
segment at a full refresh: at start-up, at each reconcile (:meth:`TextSync.request_full`, SIGUSR1
too) and every ``reconcile_interval_s``. A full refresh recomputes every segment file's checksum,
whatever the last look remembered: damage that keeps a file's size and mtime (bit rot) shows in
no stat. It is deleted and rebuilt from the database (``text_index_rebuilding`` with the reason),
while searches rank with FTS5 and say so. Another process holding the writer lock (a resync
beside the worker) is ``text_index_held`` at info: no failure. After any failure the writer is
closed and a full refresh is due within ``RETRY_S`` (at most a reconcile interval): a closed
writer checks nothing, so waiting for the next change or reconcile would leave a damaged index
unrepaired on an idle database.
"""

from __future__ import annotations

import copy
import fcntl
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tantivy

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.claude_mem.values import clean
from memsync.config.formats.text_index import (
    KIND_TERM,
    META_FILE,
    VERSION,
    CheckedFile,
    TextIndexDamaged,
    body,
    committed,
    disagreement,
    garbled_files,
    index_path,
    meta_unreadable,
    open_index,
    read_meta,
    source_id,
    text_columns,
    unreadable,
    write_meta,
)
from memsync.config.formats.worker_status import worker_state
from memsync.config.native import guarded
from memsync.config.settings import Settings
from memsync.worker.process import logs
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.tail import FileStamp, stamp

TEXT_INDEX_UPDATED = "text_index_updated"
TEXT_INDEX_FAILED = "text_index_failed"
TEXT_INDEX_REBUILDING = "text_index_rebuilding"  # the index could not be read: deleted, built again
TEXT_INDEX_HELD = "text_index_held"  # another process holds the writer lock (the worker, beside a resync)
LOCK_BUSY = "LockBusy"  # in tantivy's error when another writer holds the index's lock
WRITER_LOCK = ".tantivy-writer.lock"  # tantivy's writer lock file (an flock)
READ_BATCH = 2000  # rows per read while (re)indexing; the stop flag is checked between batches
# After a failure (the database gone for a moment, another writer's lock): the next full refresh,
# which reopens the writer and checks the index. Short enough that damage meanwhile is not left
# for a reconcile interval; long enough that a database gone for hours costs an open every 10 s.
RETRY_S = 10.0


@dataclass
class RefreshResult:
    """What one refresh did: rows appended per kind, kinds rebuilt, and whether a stop cut it short."""

    appended: dict[str, int]
    rebuilt: list[str]
    seconds: float
    interrupted: bool = False


class _Stopped(Exception):
    """The caller asked the refresh to stop (its work is rolled back, the index stays as it was)."""


class TextIndexWriter:
    """The one writer of the index (tantivy's own lock keeps a second process out). Not
    thread-safe: the worker calls it from its sync thread only."""

    def __init__(self, settings: Settings, verified: dict[str, CheckedFile] | None = None) -> None:
        self.settings = settings
        self.path = index_path(settings)
        self._meta = read_meta(self.path)
        ours = self._meta is not None and self._meta.get("db") == source_id(settings.db)
        why = _damaged(self.path, verified) if ours else \
            "its meta file is unreadable" if meta_unreadable(self.path) else None
        if (not ours or why is not None) and _writer_lock_held(self.path):
            # Another process writes this index (the worker, beside a resync): deleting its files
            # under it would leave two writers of two indexes. That writer rebuilds it.
            raise OSError(f"{LOCK_BUSY}: another process holds the text index's writer lock")
        if why is not None:
            logs.get_logger(component="text_index").warning(TEXT_INDEX_REBUILDING, reason=why)
        if not ours or why is not None:
            # Another database, an older layout, a half-built or a damaged index: start from nothing.
            discard(settings)
            self._meta = {"version": VERSION, "db": source_id(settings.db), "kinds": {}}
        self._index = open_index(self.path, create=True)
        self._writer: Any = self._index.writer(heap_size=15_000_000, num_threads=1)
        self._stop: threading.Event | None = None

    def close(self) -> None:
        """Release the writer and its lock. Merges in flight are abandoned rather than waited for
        (tantivy drops their output; the last commit stays whole): a worker that stops must not wait
        on an accelerator. One CI run saw a worker not stop within 60 s, and this wait was the only
        new blocking call on its way out."""
        self._writer = None

    def refresh(self, reader: SourceReader, full: bool = False, stop: threading.Event | None = None) -> RefreshResult:
        """Append rows above the watermark; with ``full``, also compare each table's fingerprint and
        rebuild a kind whose older rows changed. ``stop`` ends a long rebuild between batches:
        nothing is committed then, and the next refresh starts over."""
        t0 = time.perf_counter()
        self._stop = stop
        saved = copy.deepcopy(self._meta)
        try:
            return self._refresh(reader, full, t0)
        except _Stopped:
            self._writer.rollback()
            self._meta = saved
            return RefreshResult({}, [], time.perf_counter() - t0, interrupted=True)

    def _refresh(self, reader: SourceReader, full: bool, t0: float) -> RefreshResult:
        appended: dict[str, int] = {}
        rebuilt: list[str] = []
        assert self._meta is not None
        kinds_meta: dict[str, Any] = self._meta["kinds"]
        max_ids = reader.max_ids()
        changed = False
        for kind in KINDS:
            cols = text_columns(kind)
            mark = kinds_meta.get(kind.value)
            max_id = max_ids[kind]
            if mark is not None and max_id < int(mark["max_id"]):
                mark = None  # ids went down: the database was replaced
            if full and mark is not None and reader.text_fingerprint(kind, cols, 0, int(mark["max_id"])) != (
                    int(mark["n"]), int(mark["hash"])):
                mark = None  # an edit or delete below the watermark
            if mark is None:
                self._writer.delete_documents_by_term("kind", KIND_TERM[kind])
                self._add_rows(reader, kind, cols, 0, max_id)
                n, text_hash = reader.text_fingerprint(kind, cols, 0, max_id)
                rebuilt.append(kind.value)
            elif max_id > int(mark["max_id"]):
                old = int(mark["max_id"])
                appended[kind.value] = self._add_rows(reader, kind, cols, old, max_id)
                n, text_hash = reader.text_fingerprint(kind, cols, old, max_id)
                n, text_hash = n + int(mark["n"]), text_hash + int(mark["hash"])
            else:
                continue
            kinds_meta[kind.value] = {"max_id": max_id, "n": n, "hash": text_hash}
            changed = True
        if changed:
            self._writer.commit()
        if changed or "opstamp" not in self._meta:
            # What the commit left (merges keep both): a search or check that finds the index
            # at an older commit or holding other documents knows it is not this one.
            record = committed(self.path)
            if record is not None:
                self._meta["opstamp"], self._meta["docs"] = record
            write_meta(self.path, self._meta)
        return RefreshResult(appended, rebuilt, time.perf_counter() - t0)

    def _add_rows(self, reader: SourceReader, kind: Kind, cols: tuple[str, ...], after: int, up_to: int) -> int:
        """Index the rows with after < id <= up_to; returns how many."""
        n = 0
        while after < up_to:
            if self._stop is not None and self._stop.is_set():
                raise _Stopped
            batch = [r for r in reader.read_batch(kind, after, READ_BATCH) if r.id <= up_to]
            for row in batch:
                if row.excluded:
                    continue  # an excluded project: not searchable (config.claude_mem.projects)
                doc = tantivy.Document()
                doc.add_text("kind", KIND_TERM[kind])
                doc.add_integer("row", row.id)
                for project in {row.project, row.merged_into_project} - {""}:
                    doc.add_text("project", project)
                if kind is Kind.OBSERVATION and clean(row.values.get("type")):
                    doc.add_text("type", clean(row.values.get("type")))
                epoch = row.values.get("created_at_epoch")
                doc.add_integer("epoch", int(epoch) if isinstance(epoch, int | float) else 0)
                doc.add_text("body", body(clean(row.values.get(c)) for c in cols))
                self._writer.add_document(doc)
            n += len(batch)
            if len(batch) < READ_BATCH:
                return n
            after = batch[-1].id
        return n


class TextSync:
    """When to refresh (see the module docstring), with failures contained."""

    def __init__(self, settings: Settings, stop: threading.Event | None = None) -> None:
        self.s = settings
        self.stop = stop
        self.log = logs.get_logger(component="text_index")
        self._writer: TextIndexWriter | None = None
        self._full_at = 0.0
        self._append_at = 0.0
        self._stamp: FileStamp | None = None
        self._seen: FileStamp | None = None
        self._last_error: str | None = None
        self._verified: dict[str, CheckedFile] = {}  # segment files whose checksums matched, as they were then
        self._full_due = threading.Event()  # a reconcile asked for a full refresh (any thread)

    @property
    def failing(self) -> str | None:
        """Why the last refresh failed (None: it did not, or another memsync process holds the
        writer, which is no failure): the worker reports it in worker.json for `memsync status`."""
        error = self._last_error
        return None if error is None or LOCK_BUSY in error else error

    def request_full(self) -> None:
        """Make the next step a full refresh (safe from any thread): a reconcile checks the index too."""
        self._full_due.set()

    def step(self, force_full: bool = False) -> RefreshResult | None:
        """Refresh when due; returns what was done (None when nothing was due or it failed)."""
        if not self.s.text_index:
            return None
        now = time.monotonic()
        full = force_full or now >= self._full_at or self._full_due.is_set()
        if full:
            self._full_due.clear()  # one asked for during this refresh makes the next one full too
        current = stamp(self.s.db)
        # Appending every second cost a commit (~28 ms) and a segment each, and the merges of
        # those segments held ~50 MB more memory (measured); rows not yet appended are found
        # through FTS5's tail meanwhile.
        due = full or not (current == self._stamp or now < self._append_at)
        if not due and self._writer is None:
            return None
        try:
            with guarded("tantivy", TextIndexDamaged):
                result = self._refresh(full, due)
        except Exception as exc:  # noqa: BLE001 - tantivy, SQLite, the file system: none may stop the sync
            message = f"{type(exc).__name__}: {exc}"[:300]
            if message != self._last_error:
                if LOCK_BUSY in message:
                    # Another process writes the index (tantivy's writer lock): a resync or a
                    # `memsync demo` beside a running worker. Nothing failed; that writer keeps it
                    # up to date, and this one tries again at its next refresh.
                    self.log.info(TEXT_INDEX_HELD, holder=_holder(self.s), reason="its writer lock is held")
                else:
                    self.log.warning(TEXT_INDEX_FAILED, reason=message)
                self._last_error = message
            self.close()
            # A closed writer checks nothing until the next refresh: make that one full, and soon.
            self._full_at = now + min(RETRY_S, self.s.reconcile_interval_s)
            return None
        self._last_error = None
        if result is None:
            return None
        if result.interrupted:  # the worker is stopping: the next start does it again
            return result
        # A changed stamp is trusted only once it was seen twice: the WAL grows before its commit is
        # visible, so the first look can miss a row (the search then takes it from FTS5 meanwhile).
        self._stamp = current if current == self._seen else None
        self._seen = current
        if full:
            self._full_at = now + self.s.reconcile_interval_s
        if result.appended or result.rebuilt:
            self._append_at = now + self.s.text_index_append_s
        if result.appended or result.rebuilt:
            self.log.info(TEXT_INDEX_UPDATED, appended=result.appended, rebuilt=result.rebuilt,
                          seconds=round(result.seconds, 3))
        return result

    def _refresh(self, full: bool, due: bool) -> RefreshResult | None:
        """Check the index (the checksums of the files that changed since the last look; on a full
        refresh every file's checksum and a query over every segment), rebuild it when damaged,
        then refresh it."""
        if full:
            # Recompute every checksum: a file garbled in place with its size and mtime kept (bit
            # rot, a `touch -r`) looks unchanged to the memo, which only saves work between full checks.
            self._verified.clear()
        if self._writer is not None and (why := _damaged(self._writer.path, self._verified, deep=full)):
            # Damaged under the running writer (a segment garbled, tantivy's meta.json gone): start over.
            self.close()
            self.log.warning(TEXT_INDEX_REBUILDING, reason=why)
            discard(self.s)
            self._verified.clear()
            full = True
        elif not due:
            return None
        if self._writer is None:
            self._writer = TextIndexWriter(self.s, self._verified)
        with SourceReader.open(self.s) as reader:
            return self._writer.refresh(reader, full=full, stop=self.stop)

    def close(self) -> None:
        """Release the index writer (and its lock)."""
        writer = self._writer
        self._writer = None
        if writer is not None:
            writer.close()


def discard(settings: Settings) -> None:
    """Delete the index (the meta file first: a crash in between leaves an index no search trusts)."""
    path = index_path(settings)
    (path / META_FILE).unlink(missing_ok=True)
    if path.exists():
        shutil.rmtree(path)


def _damaged(path: Path, verified: dict[str, CheckedFile] | None = None, deep: bool = True) -> str | None:
    """Why the index cannot be read, when a second look agrees (a read that raced another writer's
    clean-up of old segments must not cost a rebuild). Not ``deep``: memsync's record and the
    checksums of changed files only (a stat per file), without opening the index."""
    def look() -> str | None:
        if deep:
            return unreadable(path, verified)
        return disagreement(path, read_meta(path) or {}) or garbled_files(path, verified)

    why = look()
    return None if why is None or look() is None else why


def _writer_lock_held(path: Path) -> bool:
    """Whether another process holds tantivy's writer lock on the index (an flock on its lock
    file, as tantivy takes it); only looked at, never kept."""
    try:
        with open(path / WRITER_LOCK, "rb") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fh, fcntl.LOCK_UN)
    except BlockingIOError:
        return True
    except OSError:  # no lock file: no writer
        return False
    return False


def _holder(settings: Settings) -> str:
    """Who holds the index's writer lock, as far as can be told: the worker when one is up and it
    is not this process (the worker itself meets a resync's lock)."""
    worker = worker_state(settings.data_dir, int(time.time() * 1000))
    if worker.get("up") and worker.get("pid") != os.getpid():
        return "the worker, which brings it up to date"
    return "another memsync process"
