"""What a first sync has made searchable by meaning, and when the rest will be.

A full pass goes newest first (``worker.pipeline.sync``): every row newer than the next row it will
compare is synced. So, from the pass's place (its cursor: per kind, the rows at or below an id are
still to compare), the rows left and the rate so far, :class:`FirstSyncProgress` tells
``worker.json`` and ``memsync status``: searchable by meaning back to a date, the rows left (and
about how many documents), the rate, and when the default window and all of it will be done.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from memsync.config.formats.first_sync import Cursor
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.state import now_ms

DAY_MS = 86_400_000


@dataclass
class FirstSyncProgress:
    """A running full pass's progress; ``cursor`` is the pass's own (updated as it goes)."""

    cursor: Cursor
    window_days: int
    started: float = 0.0  # monotonic start of the pass
    rows: int = 0  # rows compared so far
    documents: int = 0  # documents embedded so far

    def __post_init__(self) -> None:
        self.started = self.started or time.monotonic()

    def passed(self, rows: int, embedded: int) -> None:
        """A batch of the pass is through (``worker.pipeline.sync`` ProgressFn)."""
        self.rows += rows
        self.documents += embedded

    def snapshot(self, reader: SourceReader) -> dict[str, Any]:
        """The figures as of now (a few primary-key lookups and COUNTs per kind)."""
        seconds = max(time.monotonic() - self.started, 1e-6)
        rows_per_s = self.rows / seconds
        left = {k: reader.count_at_or_below(k, at) for k, at in self.cursor.items()}
        rows_left = sum(left.values())
        window_from = now_ms() - self.window_days * DAY_MS if self.window_days else None
        window_left = rows_left if window_from is None else sum(
            reader.count_at_or_below(k, at, since_ms=window_from) for k, at in self.cursor.items() if left[k])
        # Every row newer than the next one each kind will compare is synced (ids grow with time).
        next_rows = [e for k, at in self.cursor.items() if left[k]
                     if (e := reader.newest_at_or_below(k, at)) is not None]
        per_row = self.documents / self.rows if self.rows else None

        def eta(rows: int) -> float | None:
            return 0.0 if rows == 0 else round(rows / rows_per_s, 1) if rows_per_s > 0 else None

        return {"searchable_from_ms": max(next_rows) if next_rows else None, "rows_left": rows_left,
                "documents_left": None if per_row is None else round(rows_left * per_row),
                "window_rows_left": window_left, "window_days": self.window_days,
                "docs_per_s": round(self.documents / seconds, 1), "rows_per_s": round(rows_per_s, 1),
                "eta_window_s": eta(window_left), "eta_all_s": eta(rows_left)}
