"""Keeping memsync's text index (``search.textindex``) in step with the agent's database.

The daemon calls :meth:`TextSync.step` on every loop, Chroma up or down: the index is what keeps
the lexical fallback fast while Chroma is away. It is an accelerator, so nothing about it may stop
the sync: failures are logged (once per distinct message) and retried at the next change.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from config.settings import Settings
from search.rows import SourceRows
from search.textindex import RefreshResult, TextIndexWriter
from worker import logs
from worker.tail import FileStamp, stamp

TEXT_INDEX_UPDATED = "text_index_updated"
TEXT_INDEX_FAILED = "text_index_failed"
STATEMENT_MS = 600_000


class TextSync:
    """Appends new rows when the database file changed; compares fingerprints (edits, deletes) at
    start and then once per reconcile interval."""

    def __init__(self, settings: Settings, stop: threading.Event | None = None) -> None:
        self.s = settings
        self.stop = stop
        self.log = logs.get_logger(component="text_index")
        self._writer: TextIndexWriter | None = None
        self._full_at = 0.0
        self._stamp: FileStamp | None = None
        self._seen: FileStamp | None = None
        self._last_error: str | None = None

    def step(self, force_full: bool = False) -> RefreshResult | None:
        """Refresh when due; returns what was done (None when nothing was due or it failed)."""
        if not self.s.text_index:
            return None
        now = time.monotonic()
        full = force_full or now >= self._full_at
        current = stamp(self.s.db)
        if not full and current == self._stamp:
            return None
        try:
            if self._writer is None:
                self._writer = TextIndexWriter(self.s)
            # Background work: a fingerprint is one scan of a table (seconds at a million rows), so the
            # search's per-statement limit does not apply; the reads are short-lived snapshots anyway.
            rows = SourceRows(self.s.db, self.s.sqlite_busy_timeout_ms, statement_ms=STATEMENT_MS)
            try:
                result = self._writer.refresh(rows, full=full, stop=self.stop)
            finally:
                rows.close()
        except Exception as exc:  # noqa: BLE001 - tantivy, SQLite, the file system: none may stop the sync
            message = f"{type(exc).__name__}: {exc}"[:300]
            if message != self._last_error:
                self.log.warning(TEXT_INDEX_FAILED, reason=message)
                self._last_error = message
            self.close()
            return None
        self._last_error = None
        if result.interrupted:  # the worker is stopping: the next start does it again
            return result
        # A changed stamp is trusted only once it was seen twice: the WAL grows before its commit is
        # visible, so the first look can miss a row (the search then takes it from FTS5 meanwhile).
        self._stamp = current if current == self._seen else None
        self._seen = current
        if full:
            self._full_at = now + self.s.reconcile_interval_s
        if result.appended or result.rebuilt:
            self.log.info(TEXT_INDEX_UPDATED, appended=result.appended, rebuilt=result.rebuilt,
                          seconds=round(result.seconds, 3))
        return result

    def close(self) -> None:
        """Release the index writer (and its lock)."""
        writer: Any = self._writer
        self._writer = None
        if writer is not None:
            writer.close()
