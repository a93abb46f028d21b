"""``memsync worker``: keeps Chroma in step with the agent's database, beside the agent.

Lifecycle only; each unit of work is a sync pass (worker/sync.py) run on this thread:
- **Tail**: every ``poll_interval_s`` (or sooner, when a file event wakes it) compare the database
  files' stamp; only when it moved, read the highest ids, and sync rows above the watermarks.
  Polling is the truth; watchdog events are hints (style 4), and no work runs on their thread.
- **Reconcile**: a full hash comparison at start-up, every ``reconcile_interval_s`` (an
  APScheduler job that only raises a flag), on SIGUSR1, and whenever the database was replaced
  (new inode, or a max id below one seen before).
- **Degraded**: Chroma or the database unavailable: rows stay pending, retries back off from the
  poll interval to ``backoff_cap_s``, one ``sync_degraded`` line and one ``sync_recovered`` line.
- **Stop**: first SIGINT/SIGTERM finishes the batch, writes state and stops the managed Chroma
  server it started; a second one exits at once (nothing is lost: records follow acknowledgements).
- **State for others**: ``DATA_DIR/worker.json`` (pid, heartbeat, mode, lag, pending, errors),
  read by ``memsync status``.
"""

from __future__ import annotations

import contextlib
import faulthandler
import fcntl
import json
import os
import signal
import sqlite3
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from memsync.config.chroma import collections as stores
from memsync.config.chroma.server import ManagedServer, heartbeat
from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.embedding import get_embedder
from memsync.config.errors import ConfigError, SourceUnavailable, StoreUnavailable
from memsync.config.settings import Settings
from memsync.worker import compact, logs
from memsync.worker.backoff import Backoff
from memsync.worker.signals import SignalRelay
from memsync.worker.sink import ChromaSink
from memsync.worker.source import SourceReader
from memsync.worker.state import ACTIVE_COLLECTION, SyncState, now_ms
from memsync.worker.sync import Syncer, SyncResult
from memsync.worker.tail import FileStamp, oldest_pending_ms, stamp
from memsync.worker.textsync import TextSync
from memsync.worker.vectorcopy import VectorCopyWriter, fill_from_store, open_writer

STATUS_FILE = "worker.json"
LOCK_FILE = "worker.lock"
HEARTBEAT_EVERY_S = 5.0
COMPACT_CHECK_S = 60.0  # how often an idle worker looks at the churn (one COUNT over its records)
COPY_FILL_BUDGET = 5000  # documents per idle step when filling a vector copy from Chroma (~0.5 s)


@dataclass
class WorkerStatus:
    """What ``worker.json`` says; written atomically by the worker."""

    pid: int
    started_at_ms: int
    mode: str
    db: str
    heartbeat_ms: int = 0
    chroma_reachable: bool = False
    degraded: bool = False
    consecutive_errors: int = 0
    last_error: str | None = None
    last_sync_ms: int | None = None
    last_reconcile_ms: int | None = None
    reconciles: int = 0
    compactions: int = 0
    passes: int = 0
    lag_ms: int = 0
    pending_rows: int = 0
    failed_rows: int = 0
    stopping: bool = False
    totals: dict[str, int] = field(default_factory=dict)

    def write(self, data_dir: Path) -> None:
        """Atomic write (temp file + rename)."""
        tmp = data_dir / (STATUS_FILE + ".tmp")
        tmp.write_text(json.dumps(vars(self)))
        os.replace(tmp, data_dir / STATUS_FILE)


def read_worker_status(data_dir: Path) -> dict[str, Any] | None:
    """The last status the worker wrote, or None."""
    try:
        return dict(json.loads((data_dir / STATUS_FILE).read_text()))
    except (OSError, ValueError):
        return None


class Worker:
    """The daemon. ``run()`` blocks until stopped; ``once()`` does one full pass and returns."""

    def __init__(self, settings: Settings, metrics_port: int | None = None,
                 stop: threading.Event | None = None) -> None:
        self.s = settings
        self.metrics_port = metrics_port
        self.metrics: Any = None
        self.stop = stop or threading.Event()  # `once` shares the command's Ctrl-C event
        self.wake = threading.Event()
        self.reconcile_due = threading.Event()
        self.health_due = threading.Event()
        self.log = logs.get_logger(component="worker")
        self.backoff = Backoff(settings.poll_interval_s, settings.backoff_cap_s)
        self.status = WorkerStatus(os.getpid(), now_ms(), settings.chroma_mode, str(settings.db))
        self.embedder = get_embedder(settings.embedding_model, settings.embedding_batch_size,
                                     settings.embedding_max_tokens, settings.embedding_threads)
        self._server = ManagedServer(settings) if settings.chroma_mode == "managed" else None
        self._handle: stores.ChromaHandle | None = None
        self._sink: ChromaSink | None = None
        self._copy: VectorCopyWriter | None = None  # the local vector copy of the active generation
        self._reader: SourceReader | None = None
        self._state: SyncState | None = None
        self._stamp: FileStamp | None = None
        self._settled = False
        self._max_seen: dict[Kind, int] = {}
        self._lock: IO[str] | None = None
        self._signals: SignalRelay | None = None
        self._status_written = 0.0
        self._passes_written = -1
        self._last_change = time.monotonic()  # for compaction: only after compact_idle_s without new rows
        self._next_compact_check = 0.0
        self._text = TextSync(settings, self.stop)

    # -- lifecycle -----------------------------------------------------------------------------

    def _acquire_lock(self) -> None:
        self.s.data_dir.mkdir(parents=True, exist_ok=True)
        fh = open(self.s.data_dir / LOCK_FILE, "a+")  # noqa: SIM115 - held while the worker runs
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            other = read_worker_status(self.s.data_dir) or {}
            raise ConfigError(
                f"another worker (pid {other.get('pid', '?')}) already runs for {self.s.data_dir}"
            ) from None
        self._lock = fh

    def install_signals(self) -> None:
        """SIGINT/SIGTERM: stop after the batch; again: exit now. SIGUSR1: reconcile now.

        The handlers run on a relay thread (worker.signals): setting ``stop`` from a raw handler
        can deadlock the main thread waiting on it. They stay installed until the process exits,
        so that a second signal during shutdown still exits at once."""

        def on_stop(signum: int) -> None:
            if self.stop.is_set():
                self.log.warning("worker_exit_now", signal=signum)
                if self._server is not None and self._server.started and self._server.info:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(self._server.info.pid, signal.SIGTERM)
                os._exit(130)
            self.log.info("worker_stopping", signal=signum)
            self.stop.set()
            self.wake.set()

        def on_usr1(signum: int) -> None:
            self.request_reconcile()

        self._signals = SignalRelay({signal.SIGINT: on_stop, signal.SIGTERM: on_stop,
                                     signal.SIGUSR1: on_usr1}).install()
        # SIGUSR2 prints every thread's stack to stderr: how to see where a worker that does not
        # stop is waiting (the tests send it before they give up on a worker). faulthandler's
        # handler is C code that takes no Python lock.
        faulthandler.register(signal.SIGUSR2, all_threads=True)
        # A crash in native code (SIGSEGV, SIGABRT, ...) leaves every thread's Python stack in the
        # log instead of a log that just stops.
        faulthandler.enable(all_threads=True)

    def request_reconcile(self) -> None:
        """Ask for a full comparison at the next step (safe from any thread or signal handler)."""
        self.reconcile_due.set()
        self.wake.set()

    def _request_health(self) -> None:
        self.health_due.set()
        self.wake.set()

    def run(self) -> int:
        """Run until stopped. Returns the exit code."""
        from apscheduler.schedulers.background import BackgroundScheduler

        from memsync.worker.watch import watch_database

        self._acquire_lock()
        self._state = SyncState(self.s.state_path)
        scheduler = BackgroundScheduler(daemon=True)
        # Jobs only raise flags: the work itself happens on this thread, never on theirs.
        scheduler.add_job(self.request_reconcile, "interval", seconds=self.s.reconcile_interval_s,
                          id="reconcile", max_instances=1, coalesce=True)
        scheduler.add_job(self._request_health, "interval", seconds=self.s.health_interval_s,
                          id="health", max_instances=1, coalesce=True)
        observer: Any = None
        self.log.info("worker_started", pid=os.getpid(), db=str(self.s.db), mode=self.s.chroma_mode,
                      poll_interval_s=self.s.poll_interval_s)
        try:
            if self.metrics_port:
                from memsync.worker.metrics import WorkerMetrics

                try:
                    self.metrics = WorkerMetrics(self.metrics_port)
                except OSError as exc:
                    raise ConfigError(f"metrics port {self.metrics_port}: {exc.strerror or exc}") from exc
            scheduler.start()
            with contextlib.suppress(OSError):
                observer = watch_database(self.s.db, self.wake)
            self.request_reconcile()  # at start-up: edits and deletes made while we were down
            while not self.stop.is_set():
                delay = self.step()
                if self.stop.is_set():
                    break
                if self.wake.wait(delay) and not self.stop.is_set():
                    # Debounce: a burst of file events becomes one step, and the commit that caused
                    # them has time to become visible.
                    self.stop.wait(0.05)
                self.wake.clear()
        finally:
            scheduler.shutdown(wait=False)
            if observer is not None:
                observer.stop()
                observer.join(timeout=5)
            self._shutdown()
        return 0

    def once(self) -> SyncResult:
        """One full reconcile pass and return (for cron and tests)."""
        self._acquire_lock()
        self._state = SyncState(self.s.state_path)
        try:
            self._text.step(force_full=True)
            self._ensure_open()
            result = self._pass(full=True)
            if not result.interrupted and self._copy is not None and not self._copy.complete:
                self._fill_copy(budget=None)
            return result
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        self.status.stopping = True
        if self.metrics is not None:
            self.metrics.update(self.status)
            self.metrics.close()
            self.metrics = None
        self._close_store()
        if self._copy is not None:
            self._copy.close()
            self._copy = None
        self._text.close()
        if self._server is not None:
            self._server.stop()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self.status.chroma_reachable = False
        with contextlib.suppress(OSError):
            self.status.write(self.s.data_dir)
        if self._state is not None:
            self._state.close()
            self._state = None
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None
        self.log.info("worker_stopped")

    # -- one step ------------------------------------------------------------------------------

    def step(self) -> float:
        """Check, sync what is due, record status. Returns how long to wait before the next step."""
        try:
            if self.health_due.is_set():
                self.health_due.clear()
                self._check_health()
            self._text.step()  # before Chroma: it keeps the lexical fallback fast while Chroma is down
            self._ensure_open()
            full = self.reconcile_due.is_set() or self._replaced()
            if full:
                self.reconcile_due.clear()
                self._pass(full=True)
            elif self._changed():
                self._pass(full=False)
                self._last_change = time.monotonic()
            elif self._copy is not None and not self._copy.complete:
                self._fill_copy()
            elif self._compaction_due():
                self._compact()
        except (StoreUnavailable, SourceUnavailable) as exc:
            self._degrade(exc)
            return self.backoff.delay
        ended = self.backoff.succeed()
        if ended:
            self.log.info("sync_recovered", errors=ended)
        self.status.degraded, self.status.consecutive_errors = False, 0
        self._write_status()
        # A stamp that just moved gets its second look soon: the commit behind it may not have been
        # visible yet, and waiting a whole poll interval would add up to a second of lag.
        return self.s.poll_interval_s if self._settled else min(self.s.poll_interval_s, 0.1)

    def _degrade(self, exc: Exception) -> None:
        if isinstance(exc, StoreUnavailable):
            self._close_store()
            self.status.chroma_reachable = False
        if isinstance(exc, SourceUnavailable) and self._reader is not None:
            self._reader.close()
            self._reader = None
        if self.backoff.fail():
            self.log.warning("sync_degraded", reason=str(exc)[:300])
        self.status.degraded, self.status.consecutive_errors = True, self.backoff.failures
        self.status.last_error = str(exc)[:500]
        self._update_lag()
        self._write_status(force=True)

    def _check_health(self) -> None:
        if self._handle is None:
            return
        info = self._server.info if self._server is not None else None
        host, port = (info.host, info.port) if info else (self.s.chroma_host, self.s.chroma_port)
        if self.s.chroma_mode != "embedded" and not heartbeat(host, port, timeout_s=min(5.0, self.s.chroma_timeout_s)):
            raise StoreUnavailable(f"Chroma at {host}:{port} stopped answering its heartbeat")

    def _ensure_open(self) -> None:
        if self._reader is None:
            self._reader = SourceReader(self.s.db, self.s.sqlite_busy_timeout_ms)
            self._stamp = None
        if self._sink is None:
            # Managed mode: ensure() adopts the healthy server or starts (restarts) one.
            self._handle = stores.connect(self.s, server=self._server)
            collection = stores.open_collection(self._handle.client, self.s, self.embedder.model_id,
                                                self.embedder.dimension)
            self._sink = ChromaSink(collection, self._handle.client.get_max_batch_size())
            assert self._state is not None
            self._state.set_meta(ACTIVE_COLLECTION, self._sink.name)
            self.status.chroma_reachable = True
            if self._copy is not None and self._copy.collection != self._sink.name:
                self._copy.close()
                self._copy = None
            if self._copy is None:
                self._copy = open_writer(self.s, self._state, self._sink.name, self.embedder.model_id,
                                         self.embedder.dimension)

    def _close_store(self) -> None:
        if self._handle is not None:
            with contextlib.suppress(Exception):
                self._handle.close()
        self._handle, self._sink = None, None

    def _replaced(self) -> bool:
        """True when the database file is another one than before (restored from backup, swapped)."""
        current = stamp(self.s.db)
        if current is None:
            raise SourceUnavailable(f"source database not found: {self.s.db}")
        if self._stamp is not None and current.inode != self._stamp.inode:
            self.log.warning("database_replaced", reason="file identity changed")
            assert self._reader is not None
            self._reader.close()
            self._reader = SourceReader(self.s.db, self.s.sqlite_busy_timeout_ms)
            self._stamp, self._max_seen = None, {}
            return True
        return False

    def _changed(self) -> bool:
        """Cheap check first (file stamp, no SQL); then max ids. True when a tail pass is due."""
        current = stamp(self.s.db)
        if current is not None and current == self._stamp and self._settled and not self.status.pending_rows:
            return False
        # The WAL file changes before its commit is visible to readers, so a changed stamp gets a
        # second look at the next check, once it is stable; only then is it trusted.
        self._settled = current == self._stamp
        if self._reader is not None and self._reader.immutable and current != self._stamp:
            # An immutable snapshot does not see later writes: read the file as it is now.
            self._reader.close()
            self._reader = SourceReader(self.s.db, self.s.sqlite_busy_timeout_ms)
        self._stamp = current
        assert self._reader is not None
        max_ids = self._reader.max_ids()
        shrunk = [k.value for k in KINDS if max_ids[k] < self._max_seen.get(k, 0)]
        self._max_seen = max_ids
        if shrunk:
            self.log.warning("database_replaced", reason="max id went down", kinds=shrunk)
            self.reconcile_due.set()
            return True
        assert self._state is not None and self._sink is not None
        marks = self._state.watermarks(self._sink.name)
        return any(max_ids[k] > marks.get(k, 0) for k in KINDS)

    def _pass(self, full: bool) -> SyncResult:
        assert self._reader is not None and self._state is not None and self._sink is not None
        start_after = None if full else self._state.watermarks(self._sink.name)
        syncer = Syncer(self._reader, self._sink, self._state, self.embedder, collection=self._sink.name,
                        read_batch_rows=self.s.read_batch_rows, batch_size=self.s.batch_size, stop=self.stop,
                        max_row_attempts=self.s.max_row_attempts, copy=self._copy)
        result = syncer.run(start_after=start_after)
        if syncer.copy is None and self._copy is not None:  # a copy write failed: stop using it
            self._copy.close()
            self._copy = None
        now = now_ms()
        self.status.passes += 1
        if result.written or result.failed_rows:
            self.status.last_sync_ms = now
        if full and not result.interrupted:
            self.status.reconciles += 1
            self.status.last_reconcile_ms = now
        for key in ("added", "updated", "deleted"):
            self.status.totals[key] = self.status.totals.get(key, 0) + int(getattr(result, key))
        if result.updated or result.deleted:
            self._next_compact_check = 0.0  # new churn: look at it at the next idle step
        self.status.failed_rows = result.failed_rows if full else self.status.failed_rows
        self._update_lag()
        return result

    def _fill_copy(self, budget: int | None = COPY_FILL_BUDGET) -> None:
        """Fill the vector copy of a generation synced without one, a slice per idle step so that
        new rows keep arriving within a second meanwhile."""
        assert self._copy is not None and self._sink is not None and self._state is not None
        try:
            fill_from_store(self._copy, self._sink.collection, self._state.acknowledged_ids(self._sink.name),
                            budget=budget)
        except (OSError, ValueError) as exc:
            self.log.warning(logs.VECTOR_COPY_FAILED, op="fill", error=str(exc)[:200])
            self._copy.close()
            self._copy = None

    def _compaction_due(self) -> bool:
        """Off-peak (no new rows for compact_idle_s) and enough churn; checked at most once a minute
        so that an idle worker stays idle."""
        now = time.monotonic()
        if now < self._next_compact_check or now - self._last_change < self.s.compact_idle_s:
            return False
        self._next_compact_check = now + min(COMPACT_CHECK_S, max(1.0, self.s.compact_idle_s))
        assert self._state is not None and self._sink is not None
        return compact.due(self.s, self._state, self._sink.name)

    def _compact(self) -> None:
        assert self._handle is not None and self._state is not None
        result = compact.compact(self._handle.client, self.s, self._state, self.embedder.model_id,
                                 self.embedder.dimension, self.stop)
        self.status.compactions += 0 if result.interrupted else 1
        self._close_store()  # the next step opens the new generation (and restarts the server)
        if not result.interrupted and self._server is not None and self._server.started:
            # Our own server: pause it so that the dropped generation's files can go (worker.compact).
            try:
                with self._server.paused():
                    compact.reclaim(self.s.chroma_dir)
            except (OSError, subprocess.SubprocessError, sqlite3.Error) as exc:
                self.log.warning("reclaim_failed", error=str(exc))

    def _update_lag(self) -> None:
        if self._reader is None or self._state is None:
            return
        name = self._sink.name if self._sink is not None else self._state.get_meta(ACTIVE_COLLECTION)
        marks = self._state.watermarks(name) if name else {}
        try:
            max_ids = self._reader.max_ids()
            oldest = oldest_pending_ms(self._reader, {k: marks.get(k, 0) for k in KINDS})
        except SourceUnavailable:
            return
        self.status.pending_rows = sum(max(0, max_ids[k] - marks.get(k, 0)) for k in KINDS)
        self.status.lag_ms = max(0, now_ms() - oldest) if oldest is not None else 0

    def _write_status(self, force: bool = False) -> None:
        if self.metrics is not None:
            self.metrics.update(self.status)
        now = time.monotonic()
        # Write on news (a pass ran) or as a heartbeat; an idle worker touches the disk every 5 s.
        if not force and now - self._status_written < HEARTBEAT_EVERY_S and self.status.passes == self._passes_written:
            return
        self.status.heartbeat_ms = now_ms()
        self.status.write(self.s.data_dir)
        self._status_written = now
        self._passes_written = self.status.passes
