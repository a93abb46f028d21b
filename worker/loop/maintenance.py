"""The worker's idle work, done on the loop's thread when no new rows wait:

- **Vector copy fill**: a generation synced without a local vector copy (by an older memsync, or
  with the copy deleted) gets one filled from Chroma, ``COPY_FILL_BUDGET`` documents per idle step,
  so that new rows keep arriving within a second meanwhile (``worker.stores.vectorcopy``).
- **Vector copy check** (never trusted): the copy's files are checked against its manifest (sizes,
  codes, the entries' checksum: ``VectorCopyWriter.check``; then the vectors' block checksums,
  ``VectorCopyWriter.check_vectors``) in a cycle that starts every ``vector_copy_check_s`` (a minute)
  and after every full pass, busy or idle; the vectors are read ``COPY_CHECK_SLICE`` bytes per step, the
  next slice at the next step (50-60 ms of CPU a cycle at 313k documents, 0.11% of a core, one 1.5 MB
  buffer: ``scripts/bench_copy_check.py``). A damaged copy is discarded (``vector_copy_damaged``)
  and filled again like a missing one. A copy closed after a failed write is opened again here (its
  open checks it too).
- **Vector copy order**: the copy is rewritten without its dead entries and in date order when
  enough of it is dead or appended out of order (``VectorCopyWriter.needs_reorder``), looked at
  once a minute at most: a second or two at 313k documents, and a window then reads one slice.
  Unlike the rest, this runs in busy steps too: a worker given rows every second (5 a second in
  bench_memory's constant-size soak) has no idle step, and its copy kept every dead entry.
- **Compaction**: off-peak (no new rows for ``compact_idle_s``) and with enough churn, the active
  generation is rebuilt without its dead vectors (``worker.stores.compact``); the churn is counted at
  most once a minute so that an idle worker stays idle. Then, when the worker started the managed
  server itself, the server is paused while the dropped generation's files are reclaimed.
- **Embedding store collection**: after the worker's first full pass, and after each full pass
  that updated or deleted documents (only those passes can leave a text no record names), the
  vectors of such texts leave the embedding store (``worker.stores.embedstore``); when one is due is
  decided by ``worker.pipeline.syncpass.StoreCollection``, which a whole pass (``resync``) collects at its end.
"""

from __future__ import annotations

import sqlite3
import subprocess
import threading
import time
from typing import Any

from memsync.config.formats.vector_copy import BLOCK
from memsync.config.settings import Settings
from memsync.worker.pipeline.target import SyncTarget
from memsync.worker.process import logs
from memsync.worker.rows.state import SyncState
from memsync.worker.stores import compact
from memsync.worker.stores.compact import CompactResult
from memsync.worker.stores.vectorcopy import fill_from_store

COMPACT_CHECK_S = 60.0  # how often an idle worker looks at the churn (one COUNT over its records)
COPY_FILL_BUDGET = 5000  # documents per idle step when filling a vector copy from Chroma (~0.5 s)
REORDER_CHECK_S = 60.0  # how often the worker asks whether its vector copy needs a rewrite
REORDER_RETRY_S = 3600.0  # after a failed rewrite (its half-written files are deleted by the next)
# Bytes of vectors a step of the check reads (15-30 ms): a large copy is checked over a few steps, so
# that no step holds the copy's lock (or keeps new rows waiting) for the whole file's 50-90 ms (313k documents).
COPY_CHECK_SLICE = 32 << 20


def fill_copy(target: SyncTarget, state: SyncState, budget: int | None = COPY_FILL_BUDGET) -> None:
    """Fill ``target``'s vector copy from Chroma, ``budget`` documents at most (None: all). A copy
    that cannot be written is logged and closed: the sync goes on without it."""
    assert target.copy is not None and target.sink is not None
    try:
        fill_from_store(target.copy, target.sink.collection, state.acknowledged_ids(target.sink.name),
                        budget=budget)
    except (OSError, ValueError) as exc:
        logs.get_logger(component="worker").warning(logs.VECTOR_COPY_FAILED, op="fill", error=str(exc)[:200])
        target.close_copy()


class CopyCheck:
    """When to check the vector copy's files (see the module docstring), and the check."""

    def __init__(self) -> None:
        self._next_check: float | None = None  # one period after the first look: the writer checked as it opened
        self._block = 0  # the vectors' block the cycle goes on from (0: a cycle starts, entries first)

    def soon(self) -> None:
        """Check at the next step (after a full pass: the end of a reconcile leaves the copy checked)."""
        self._next_check = 0.0

    def due(self, target: SyncTarget) -> bool:
        """Whether a check is due (connected, the copy on in settings)."""
        now = time.monotonic()
        if self._next_check is None:
            self._next_check = now + target.s.vector_copy_check_s
        return target.sink is not None and target.s.vector_copy and now >= self._next_check

    def run(self, target: SyncTarget, state: SyncState, whole: bool = False) -> None:
        """Check the copy, one slice of its vectors (``whole``: all of them, for ``worker --once``);
        discard a damaged one (the fill rebuilds it). An unfinished cycle is due again at the next
        step. A copy closed after a failed write is opened again (its writer checks the files as it
        opens them)."""
        self._next_check = time.monotonic() + target.s.vector_copy_check_s
        if not target.s.vector_copy:
            return
        if target.copy is None:
            self._block = 0
            target.reopen_copy(state)
            return
        try:
            reason = target.copy.check() if self._block == 0 else None
            if reason is None:
                per_slice = max(1, COPY_CHECK_SLICE // (BLOCK * target.copy.dim))
                reason, self._block = target.copy.check_vectors(self._block, None if whole else per_slice)
            if reason is not None:
                target.copy.discard(reason)
        except (OSError, ValueError) as exc:
            self._block = 0
            logs.get_logger(component="worker").warning(logs.VECTOR_COPY_FAILED, op="check", error=str(exc)[:200])
            target.close_copy()
        if self._block:
            self._next_check = 0.0


class CopyOrder:
    """When to rewrite the vector copy in date order (see the module docstring), and the rewrite."""

    def __init__(self) -> None:
        self._next_check = 0.0

    def due(self, target: SyncTarget) -> bool:
        """Whether the active copy needs a rewrite; asked at most every ``REORDER_CHECK_S``."""
        now = time.monotonic()
        if target.copy is None or not target.copy.complete or now < self._next_check:
            return False
        self._next_check = now + REORDER_CHECK_S
        return target.copy.needs_reorder()

    def run(self, target: SyncTarget) -> None:
        """Rewrite the copy. A rewrite that fails (a full disk) leaves the copy as it was, in use;
        it is logged and not tried again for ``REORDER_RETRY_S``."""
        assert target.copy is not None
        try:
            target.copy.reorder()
        except (OSError, ValueError) as exc:
            logs.get_logger(component="worker").warning(logs.VECTOR_COPY_FAILED, op="reorder", error=str(exc)[:200])
            self._next_check = time.monotonic() + REORDER_RETRY_S


class Compaction:
    """When to compact (see the module docstring), and the compaction itself."""

    def __init__(self, settings: Settings, stop: threading.Event, log: Any) -> None:
        self.s = settings
        self.stop = stop
        self.log = log
        self._last_change = time.monotonic()  # only after compact_idle_s without new rows
        self._next_check = 0.0

    def rows_arrived(self) -> None:
        """New rows were synced: the idle time starts again."""
        self._last_change = time.monotonic()

    def churned(self) -> None:
        """Documents were updated or deleted: look at the churn at the next idle step."""
        self._next_check = 0.0

    def due(self, state: SyncState, collection: str) -> bool:
        """Off-peak and enough churn in ``collection``; counted at most every ``COMPACT_CHECK_S``."""
        now = time.monotonic()
        if now < self._next_check or now - self._last_change < self.s.compact_idle_s:
            return False
        self._next_check = now + min(COMPACT_CHECK_S, max(1.0, self.s.compact_idle_s))
        return compact.due(self.s, state, collection)

    def run(self, target: SyncTarget, state: SyncState) -> CompactResult:
        """Compact the active generation, drop the connection (the next step opens the new one) and
        reclaim the old generation's space when the worker owns the server."""
        assert target.handle is not None
        result = compact.compact(target.handle.client, self.s, state, target.embedder.model_id,
                                 target.embedder.dimension, self.stop)
        target.close_store()
        if not result.interrupted and target.server is not None and target.server.started:
            # Our own server: pause it so that the dropped generation's files can go (worker.stores.compact).
            try:
                with target.server.paused():
                    compact.reclaim(self.s.chroma_dir)
            except (OSError, subprocess.SubprocessError, sqlite3.Error) as exc:
                self.log.warning("reclaim_failed", error=str(exc))
        return result
