"""A first sync's frontier, kept where searches see it (format and why: ``config.formats.first_sync``).

A full pass over memsync's own collection goes newest first. When it starts on a generation whose
records do not cover every row at or below their watermarks (a first sync, or one taken up after a
crash or a stop), :class:`Frontier` writes the pass's cursor before the first range, again as the
pass moves (at most every ``WRITE_EVERY_S``: a late cursor only overstates what is missing), and
deletes it when the pass is through. A pass that yields to new rows or is stopped leaves it, so a
search run meanwhile, or with no worker at all, still says what is missing.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from memsync.config.claude_mem.schema import KINDS
from memsync.config.errors import SourceUnavailable
from memsync.config.formats.first_sync import Cursor, clear_mark, read_mark, write_mark
from memsync.worker.process import logs
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.state import SyncState, now_ms
from memsync.worker.rows.tail import unrecorded_below

WRITE_EVERY_S = 0.5


def uncovered(reader: SourceReader, state: SyncState, collection: str) -> bool:
    """Whether some row at or below the records' watermarks has no record, or a kind has rows and
    no record at all: a pass over them is (part of) a first sync. Two COUNTs per kind."""
    marks, max_ids = state.watermarks(collection), reader.max_ids()
    return any((max_ids[kind] and not marks.get(kind)) or unrecorded_below(reader, state, collection, kind,
                                                                            marks.get(kind, 0))
               for kind in KINDS)


class Frontier:
    """Writes one full pass's cursor while it runs; see the module docstring."""

    def __init__(self, data_dir: Path, collection: str) -> None:
        self.data_dir, self.collection = data_dir, collection
        self._written = 0.0
        self._failed = False

    @classmethod
    def begin(cls, data_dir: Path, reader: SourceReader, state: SyncState, collection: str,
              cursor: Cursor, resumed: bool) -> Frontier | None:
        """The frontier of a pass that starts (or, ``resumed``, goes on) at ``cursor``, written
        now; None when the pass is no first sync (every row below the watermarks is recorded, or a
        resumed pass that had none)."""
        if resumed:
            if read_mark(data_dir, collection) is None:
                return None
        else:
            try:
                if not uncovered(reader, state, collection):
                    clear_mark(data_dir, collection)  # one left by a pass another process did not finish
                    return None
            except SourceUnavailable:
                pass  # the pass itself will say so; a mark overstates at worst
        frontier = cls(data_dir, collection)
        frontier._write(cursor)
        return frontier

    def moved(self, cursor: Cursor) -> None:
        """The pass finished a range (``worker.pipeline.sync`` MovedFn)."""
        if time.monotonic() - self._written >= WRITE_EVERY_S:
            self._write(cursor)

    def ended(self, cursor: Cursor, through: bool) -> None:
        """The pass returned: through (every row compared) deletes the mark, else the cursor stays
        where the pass stopped or yielded."""
        if through:
            with contextlib.suppress(OSError):
                clear_mark(self.data_dir, self.collection)
        else:
            self._write(cursor)

    def _write(self, cursor: Cursor) -> None:
        try:
            write_mark(self.data_dir, self.collection, cursor, now_ms())
        except OSError as exc:
            # A full or read-only disk: the sync goes on; searches may then miss the note that
            # documents are still missing, so it is logged once.
            if not self._failed:
                logs.get_logger().warning("first_sync_mark_unwritable", error=str(exc)[:200])
            self._failed = True
            return
        self._failed = False
        self._written = time.monotonic()
