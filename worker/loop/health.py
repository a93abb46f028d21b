"""The worker's health and what it tells others (``worker.json``, layout in
``config.formats.worker_status``; the Prometheus metrics mirror it).

- **Chroma reachable**: every ``health_interval_s`` the loop asks for a heartbeat of the server it
  talks to (not in ``embedded`` mode); one that stops answering is treated like a failed write.
- **Degraded**: Chroma, the database or the embedding endpoint unavailable, or Chroma refusing us
  (``chroma_refused`` in ``worker.json``: token, tenant, database, certificate). Retries back off
  from the poll interval to ``backoff_cap_s``; one ``sync_degraded`` line when it starts, one
  ``chroma_refused`` per distinct refusal, and one ``sync_recovered`` when it ends.
- **Published**: when the worker takes its lock (``phase`` ``starting``), when its first full pass
  begins (``first pass``) and after each step, the counters of the passes, the lag (age of the
  oldest row above the watermarks) and the pending rows go to the metrics, and to ``worker.json``
  when a pass ran or as a heartbeat every ``HEARTBEAT_EVERY_S``, also between the batches of a
  long pass (with its rows done so far).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from memsync.chroma.remote import endpoint
from memsync.chroma.server import heartbeat
from memsync.config.claude_mem.schema import KINDS
from memsync.config.errors import (
    ConfigError,
    EmbeddingUnavailable,
    NoSpace,
    SourceUnavailable,
    StoreRefused,
    StoreUnavailable,
    one_line,
)
from memsync.config.formats.first_sync import read_mark
from memsync.config.formats.worker_status import (
    HEARTBEAT_EVERY_S,
    PHASE_FIRST_PASS,
    PHASE_FOLLOWING,
    WorkerStatus,
    reserve_in_place,
)
from memsync.config.settings import Settings
from memsync.worker.loop.backoff import Backoff
from memsync.worker.pipeline.progress import FirstSyncProgress
from memsync.worker.pipeline.sync import SyncResult
from memsync.worker.pipeline.target import StoreCheck, SyncTarget
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.state import ACTIVE_COLLECTION, SyncState, now_ms
from memsync.worker.rows.tail import oldest_pending_ms, pending_rows

if TYPE_CHECKING:
    from memsync.worker.loop.metrics import WorkerMetrics


# What a worker step may fail with and still go on: retried with backoff, never an exit.
Degrading = StoreUnavailable | SourceUnavailable | EmbeddingUnavailable | StoreRefused | NoSpace

class Health:
    """The worker's status (``status``: the fields of ``worker.json``), its backoff and its metrics."""

    def __init__(self, settings: Settings, log: Any) -> None:
        self.s = settings
        self.log = log
        self.backoff = Backoff(settings.poll_interval_s, settings.backoff_cap_s)
        self.status = WorkerStatus(os.getpid(), now_ms(), settings.chroma_mode, str(settings.db))
        self.metrics: WorkerMetrics | None = None
        self._written = 0.0
        self._passes_written = -1
        self._write_failed = False  # the last worker.json write failed (logged once per run of failures)
        # One writer of worker.json at a time: the loop, or the heartbeat thread while the loop waits.
        self._write_lock = threading.Lock()
        self._busy_until: float | None = None  # the loop waits on a call until then (monotonic)
        self._beats: threading.Thread | None = None
        self._beats_stop = threading.Event()
        self.source_cause = False  # degraded because the database cannot be read (a write to it may fix that)
        # The first pass's progress (worker.pipeline.progress), the reader it asks and the collection it
        # fills, while it runs.
        self.first_sync: tuple[FirstSyncProgress, Callable[[], SourceReader | None], str] | None = None

    def serve_metrics(self, port: int) -> None:
        """Serve the metrics on 127.0.0.1:``port`` (ConfigError when the port cannot be bound)."""
        from memsync.worker.loop.metrics import WorkerMetrics

        try:
            self.metrics = WorkerMetrics(port)
        except OSError as exc:
            raise ConfigError(f"metrics port {port}: {exc.strerror or exc}") from exc

    def check_chroma(self, target: SyncTarget) -> None:
        """StoreUnavailable when the connected Chroma server stopped answering its heartbeat (or
        the embedded store's directory is gone)."""
        if target.handle is None:
            return
        info = target.server.info if target.server is not None else None
        host, port = (info.host, info.port) if info else (self.s.chroma_host, self.s.chroma_port)
        if self.s.chroma_mode == "embedded":
            # A store directory removed under the running client: reconnect (a new, empty store
            # whose identity differs from the records', so they are aligned and the store refilled).
            if not (self.s.chroma_dir / "chroma.sqlite3").exists():
                raise StoreUnavailable(f"the embedded Chroma store {self.s.chroma_dir} was removed")
        elif not heartbeat(host, port, min(5.0, self.s.chroma_timeout_s), endpoint(self.s, host, port)):
            raise StoreUnavailable(f"Chroma at {host}:{port} stopped answering its heartbeat")

    def store_checked(self, check: StoreCheck) -> None:
        """Report a check of the collection against the records (``store_*`` of ``worker.json``)."""
        st = self.status
        st.store_documents, st.store_read_at_ms = check.store_documents, check.read_at_ms
        st.records_documents = check.records_documents
        if check.store_documents == check.records_documents:
            st.store_differs_since_ms = None
        elif st.store_differs_since_ms is None:
            st.store_differs_since_ms = check.read_at_ms
        if check.repaired:
            st.store_repairs += 1

    def degraded(self, exc: Degrading) -> None:
        """A step failed: count it (``sync_degraded`` for the first of a run, ``chroma_refused``
        once per distinct refusal) and say why."""
        if isinstance(exc, StoreUnavailable | StoreRefused):
            self.status.chroma_reachable = False
        message = one_line(str(exc), 500)  # worker.json and status show it on one line
        if isinstance(exc, StoreRefused):
            if message != self.status.chroma_refused:
                self.log.warning("chroma_refused", reason=message[:300])
            self.status.chroma_refused = message
        if isinstance(exc, EmbeddingUnavailable):
            self.status.embedding_reachable = False
        self.source_cause = isinstance(exc, SourceUnavailable)
        if self.backoff.fail():
            self.log.warning("sync_degraded", reason=message[:300])
        self.status.degraded, self.status.consecutive_errors = True, self.backoff.failures
        self.status.retry_in_s = self.backoff.delay
        self.status.next_retry_ms = now_ms() + int(self.backoff.delay * 1000)
        self.status.last_error = message

    def recovered(self) -> None:
        """A step succeeded: end a degraded run (``sync_recovered`` with how many errors it had)."""
        ended = self.backoff.succeed()
        if ended:
            self.log.info("sync_recovered", errors=ended)
        self.status.degraded, self.status.consecutive_errors, self.status.retry_in_s = False, 0, 0.0
        self.status.next_retry_ms = None
        self.status.last_error = None  # recovered: the error is history (the log keeps it)
        self.status.embedding_reachable = True
        self.status.chroma_refused = None

    def started(self) -> None:
        """The worker holds its lock: say so at once (``phase`` ``starting``), before anything
        slow, so that ``status`` never calls a starting worker down; and start the
        heartbeat thread (:meth:`busy`)."""
        reserve_in_place(self.s.data_dir)  # room for the record while worker.json cannot be written
        self.publish(force=True)
        if self._beats is None:
            self._beats_stop.clear()
            self._beats = threading.Thread(target=self._beat, name="memsync-heartbeat", daemon=True)
            self._beats.start()

    @contextlib.contextmanager
    def busy(self, what: str, up_to_s: float) -> Iterator[None]:
        """The loop waits on ``what`` (a model call, a request) for at most ``up_to_s`` seconds.

        Trigger: a call that outlasts the heartbeat's staleness limit (an endpoint taking 45 s a
        batch). Why: the loop publishes only between calls, so its heartbeat would age and ``status``
        call a working worker down (``status --check`` fails, a service manager restarts it).
        Outcome: meanwhile the heartbeat thread refreshes the heartbeat, but only for the call's own
        bound: a call stuck beyond the longest it can take stops the heartbeat, and the worker
        reads as down STALE_MS later, as a hung one should. ``waiting_on`` in ``worker.json`` says
        what it waits on, since when and for how long at most."""
        with self._write_lock:
            self.status.waiting_on = {"what": what, "since_ms": now_ms(), "up_to_s": round(up_to_s, 1)}
            self._busy_until = time.monotonic() + up_to_s
        try:
            yield
        finally:
            with self._write_lock:
                self._busy_until = None
                self.status.waiting_on = None

    def _beat(self) -> None:
        """The heartbeat thread: while the loop waits within a call's bound, ``worker.json`` is
        written again (only the heartbeat changes: the loop changes nothing while it waits)."""
        while not self._beats_stop.wait(HEARTBEAT_EVERY_S / 2):
            with self._write_lock:
                now = time.monotonic()
                if self._busy_until is None or now > self._busy_until or now - self._written < HEARTBEAT_EVERY_S:
                    continue
                self._write(now)

    def pass_started(self, full: bool) -> None:
        """A pass begins; a full one before any has ended is the ``first pass``."""
        self.status.pass_rows_done = 0
        if full and self.status.phase != PHASE_FOLLOWING:
            self.status.phase = PHASE_FIRST_PASS
            self.publish(force=True)

    def pass_progress(self, rows: int, embedded: int) -> None:
        """A batch of the running pass is through (``worker.pipeline.sync`` ProgressFn): count its rows and
        keep the heartbeat fresh; a first pass of hours is written every ``HEARTBEAT_EVERY_S``."""
        self.status.pass_rows_done += rows
        if self.first_sync is not None:
            self.first_sync[0].passed(rows, embedded)
        self.publish()

    def record_pass(self, result: SyncResult, full: bool) -> None:
        """Count a sync pass: passes, last sync and reconcile times, document totals, failed rows."""
        now = now_ms()
        if full and not result.interrupted:
            self.status.phase = PHASE_FOLLOWING
        self.status.passes += 1
        if result.written or result.failed_rows:
            self.status.last_sync_ms = now
        if full and not result.interrupted:
            self.status.reconciles += 1
            self.status.last_reconcile_ms = now
        for key in ("added", "updated", "deleted", "embedded", "reused"):  # reused: what the embedding store saved
            self.status.totals[key] = self.status.totals.get(key, 0) + int(getattr(result, key))
        self.status.failed_rows = result.failed_rows if full else self.status.failed_rows

    def update_lag(self, reader: SourceReader | None, state: SyncState | None, collection: str | None) -> None:
        """Pending rows and lag against the watermarks of ``collection`` (the active generation the
        records name when not connected); left as they were when the database cannot be read."""
        if reader is None or state is None:
            return
        name = collection if collection is not None else state.get_meta(ACTIVE_COLLECTION)
        marks = state.watermarks(name) if name else {}
        try:
            # Until a first pass is through, rows below the watermarks can lack a record too (two
            # COUNTs per kind); after it, only rows above them can.
            below = self.status.phase != PHASE_FOLLOWING
            pending = pending_rows(reader, state, name, below) if name else sum(reader.max_ids().values())
            oldest = oldest_pending_ms(reader, {k: marks.get(k, 0) for k in KINDS})
        except SourceUnavailable:
            return
        self.status.pending_rows = pending
        self.status.lag_ms = max(0, now_ms() - oldest) if oldest is not None else 0

    def publish(self, force: bool = False) -> None:
        """Update the metrics; write ``worker.json`` when a pass ran since the last write, when
        ``force``d, or as the heartbeat (an idle worker touches the disk every few seconds)."""
        if self.metrics is not None:
            self.metrics.update(self.status)
        now = time.monotonic()
        if not force and now - self._written < HEARTBEAT_EVERY_S and self.status.passes == self._passes_written:
            return
        self._describe_first_sync()
        with self._write_lock:
            self._write(now)

    def _write(self, now: float) -> None:
        """Write ``worker.json`` with a fresh heartbeat (the caller holds ``_write_lock``)."""
        self.status.heartbeat_ms = now_ms()
        try:
            self.status.write(self.s.data_dir)
        except OSError as exc:
            # A full (or read-only) disk must not stop the worker: it degrades on its own writes
            # and recovers. Meanwhile the record goes in place into the file reserved at start,
            # which needs no new space, so status still sees the heartbeat and why it is degraded.
            kept = self.status.write_in_place(self.s.data_dir, f"{type(exc).__name__}: {exc}"[:200])
            if not self._write_failed:
                self.log.warning("worker_status_unwritable", error=str(exc)[:200], written_in_place=kept)
            self._write_failed = True
            if kept:
                self._written = now
            return
        self._write_failed = False
        self._written = now
        self._passes_written = self.status.passes

    def _describe_first_sync(self) -> None:
        """``first_sync`` in worker.json: the first pass's figures (worker.pipeline.progress) while it is a
        first sync, i.e. while the pass keeps its cursor for searches (``worker.pipeline.frontier``: rows
        below the records' watermarks lack records); None after it, and for the first pass of a
        worker restarted on synced records, which embeds nothing it has not been told of."""
        if self.status.phase != PHASE_FIRST_PASS or self.first_sync is None \
                or read_mark(self.s.data_dir, self.first_sync[2]) is None:
            self.status.first_sync = None
            return
        progress, reader, _ = self.first_sync
        current = reader()
        if current is None:
            return
        with contextlib.suppress(SourceUnavailable):  # unreadable now: the last figures stay
            self.status.first_sync = progress.snapshot(current)

    def stopping(self) -> None:
        """The worker began to stop: say so in the metrics, then stop serving them, and stop the
        heartbeat thread."""
        self._beats_stop.set()
        if self._beats is not None:
            self._beats.join(timeout=5)
            self._beats = None
        self.status.stopping = True
        if self.metrics is not None:
            self.metrics.update(self.status)
            self.metrics.close()
            self.metrics = None

    def stopped(self) -> None:
        """The worker let go of Chroma: the last ``worker.json`` (a read-only disk is no error)."""
        self.status.chroma_reachable = False
        try:
            self.status.write(self.s.data_dir)
        except OSError as exc:
            self.status.write_in_place(self.s.data_dir, f"{type(exc).__name__}: {exc}"[:200])
