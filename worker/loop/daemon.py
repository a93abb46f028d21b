"""``memsync worker``: keeps Chroma in step with the agent's database, beside the agent.

The loop only (wake, back off, stop); what a step runs, in which order and with which failure
policy is one table, ``worker.loop.schedule.JOBS`` (where to add a job). Each unit of work is a sync
pass (``worker.pipeline.syncpass``, the one ``resync`` runs too) run on this thread:
- **Tail**: every ``poll_interval_s`` (or sooner, when a file event wakes it) compare the database
  files' stamp; only when it moved, read the highest ids, and sync rows above the watermarks
  (``worker.rows.tail``). Polling is the truth; watchdog events are hints, and no work runs
  on their thread.
- **Reconcile**: a full hash comparison at start-up, every ``reconcile_interval_s`` (an
  APScheduler job that only raises a flag), on SIGUSR1, and whenever the database was replaced
  (new inode, or a max id below one seen before).
- **Store check**: at each reconcile, each health check and each (re)connect, the collection's
  identity and count against the sync records; when they differ (a store wiped, restored or
  replaced), and every ``store_audit_interval_s``, the records are aligned with the store's ids
  and a reconcile re-drives exactly what changed (``worker.pipeline.target.check_store``).
- **Idle**: fill the vector copy, collect the embedding store's garbage after a full pass that
  changed documents, then compact when due (``worker.loop.maintenance``).
- **Copy order**: at most once a minute, busy or idle, rewrite the vector copy without its dead
  entries when enough of it is dead or out of order (``worker.loop.maintenance``).
- **Memory**: after steps that did work, what they freed is given back to the system, at most
  every 30 s (``worker.process.memory``).
- **Degraded**: Chroma, the database or a remote embedding endpoint unavailable: rows stay pending
  (never counted as failed) and retries back off (``worker.loop.health``, which also checks Chroma's
  heartbeat and writes ``DATA_DIR/worker.json``). A database damaged or replaced by a file that is
  no claude-mem database while the worker runs is unavailable too (``worker.rows.tail``). The health
  job cuts a backoff short only while Chroma is the cause, and a file event only while the
  database is, no shorter than one poll interval. A full disk (DATA_DIR or the Chroma path) is
  degraded the same way, at start too: the worker waits for space rather than exit.
- **Phase**: ``worker.json`` is written as soon as the lock is held (``starting``), during the first
  full pass (``first pass``, heartbeat and rows done between batches) and after (``following``).
- **Stop**: first SIGINT/SIGTERM finishes the batch, writes state and stops the managed Chroma
  server it started; a second one exits at once (nothing is lost: records follow acknowledgements).
One worker per data directory (``DATA_DIR/worker.lock``, held by ``worker.loop.lock``).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from memsync.chroma.server import PORT_ATTEMPTS
from memsync.config.diskspace import explain, no_space
from memsync.config.errors import (
    NoSpace,
    SourceUnavailable,
    StoreDamaged,
    StoreRefused,
    StoreUnavailable,
)
from memsync.config.formats.database_owner import claim
from memsync.config.formats.first_sync import Cursor, every_kind
from memsync.config.formats.worker_status import HEARTBEAT_EVERY_S, PHASE_FIRST_PASS
from memsync.config.settings import Settings
from memsync.embedding import Embedder, close_embedder, embed_bound_s, make_embedder, waits_on
from memsync.worker.loop.health import Degrading, Health
from memsync.worker.loop.lock import WorkerLock
from memsync.worker.loop.maintenance import Compaction, CopyCheck, CopyOrder
from memsync.worker.loop.schedule import (
    AFTER_WHOLE,
    BEFORE_WHOLE,
    JOBS,
    Action,
    Failure,
    Kind,
    run_jobs,
    run_whole,
    timers,
)
from memsync.worker.pipeline.progress import FirstSyncProgress
from memsync.worker.pipeline.sink import MirroredSink, VectorSink
from memsync.worker.pipeline.sync import Destination, SyncOptions, SyncResult, YieldFn
from memsync.worker.pipeline.syncpass import EVERY_ROW, Checked, OnResult, Opened, Scope, StoreCollection, SyncPass
from memsync.worker.pipeline.target import SyncTarget, store_counts
from memsync.worker.process import logs
from memsync.worker.process.memory import Trimmer, freeze_startup
from memsync.worker.process.signals import SignalRelay
from memsync.worker.rows.state import SyncState
from memsync.worker.rows.tail import SourceTail
from memsync.worker.stores.embedstore import EmbeddingStore
from memsync.worker.stores.textsync import TextSync

Searchable = Callable[[int, str], None]  # (documents synced, what is searchable) once search is usable
CONNECT_CALLS = 6  # Chroma calls of a connection: heartbeat, pointer, generation, its update, upstream store (2)


class Worker:
    """The daemon. ``run()`` blocks until stopped; ``once()`` does one full pass and returns."""

    def __init__(self, settings: Settings, metrics_port: int | None = None,
                 stop: threading.Event | None = None, on_searchable: Searchable | None = None) -> None:
        """``on_searchable``: told once, with the documents synced and what is searchable, when
        search is first usable (the first full pass is through, or a first sync's default window
        is covered); the command prints it for the person who started the worker."""
        self.s = settings
        self._on_searchable = on_searchable
        self._started_at = time.monotonic()
        self.metrics_port = metrics_port
        self.stop = stop or threading.Event()  # `once` shares the command's Ctrl-C event
        self.wake = threading.Event()
        self.reconcile_due = threading.Event()
        self.health_due: threading.Event = threading.Event()
        self.log = logs.get_logger(component="worker")
        self.health = Health(settings, self.log)
        # Retries of a remote endpoint wait on the stop event: a stop is never held up by a backoff.
        embedder = make_embedder(settings, wait=self.stop.wait)
        self._target: SyncTarget = SyncTarget(settings, embedder, wait=self.stop.wait)
        self._tail = SourceTail(settings.db, settings.sqlite_busy_timeout_ms, self.reconcile_due,
                                settings.excluded_projects)
        self._compaction: Compaction = Compaction(settings, self.stop, self.log)
        self._copy_order: CopyOrder = CopyOrder()
        self._copy_check: CopyCheck = CopyCheck()
        self._serving = False  # the loop runs (not --once): worth warming the server's index for searches
        self._trimmer = Trimmer()
        self._text: TextSync = TextSync(settings, self.stop)
        self._lock = WorkerLock(settings.data_dir, settings.db)
        self._state: SyncState | None = None
        self._store: EmbeddingStore | None = None  # the embedding store, open while the worker runs
        self._collection: StoreCollection = StoreCollection(None, due=False)
        self._signals: SignalRelay | None = None
        self._store_due = True  # check the collection against the records at the next step
        self._full: bool = False  # this step's full pass starts from the top (worker.loop.schedule: store check)
        self._worked = False  # this step did work (not idle): the memory trimmer trims after it
        self._upstream_level = False  # the upstream-readable store's records known level with ours
        # A full pass that yielded to rows committed meanwhile: where it goes on (worker.pipeline.sync).
        self._resume: Cursor | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def install_signals(self) -> None:
        """SIGINT/SIGTERM: stop after the batch; again: exit now. SIGUSR1: reconcile now.

        The handlers run on a relay thread (worker.process.signals): setting ``stop`` from a raw handler
        can deadlock the main thread waiting on it. They stay installed until the process exits,
        so that a second signal during shutdown still exits at once."""

        def on_stop(signum: int) -> None:
            if self.stop.is_set():
                self.log.warning("worker_exit_now", signal=signum)
                self._target.kill_server()
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

    def _text_step(self, force_full: bool = False) -> bool:
        """One step of memsync's text index (``worker.stores.textsync``); whether it refreshed. Its
        failure, or its recovery, goes into worker.json for ``memsync status``."""
        done = self._text.step(force_full=force_full) is not None
        self.health.status.text_index_error = self._text.failing
        return done

    def request_reconcile(self) -> None:
        """Ask for a full comparison at the next step (safe from any thread or signal handler); the
        text index's full check too (every segment's checksum recomputed)."""
        self._text.request_full()
        self.reconcile_due.set()
        self.wake.set()

    def _request_health(self) -> None:
        self.health_due.set()
        # Chroma's heartbeat is what this job checks: while Chroma is the cause, a step at each health
        # interval finds its return within that interval (not at the end of a backoff of up to
        # backoff_cap_s). Degraded for another cause, the backoff is not cut short.
        if not self.health.status.degraded or not self.health.status.chroma_reachable:
            self.wake.set()

    def run(self) -> int:
        """Run until stopped. Returns the exit code."""
        from apscheduler.schedulers.background import BackgroundScheduler

        from memsync.worker.loop.watch import watch_database

        if not self._start(wait_for_space=True):
            self._shutdown()  # stopped while waiting for space
            return 0
        self._serving = True
        freeze_startup()  # what it holds from here on lives as long as it: collections skip it
        scheduler = BackgroundScheduler(daemon=True)
        # Jobs only raise flags: the work itself happens on this thread, never on theirs.
        for job in timers():
            scheduler.add_job(job.run, "interval", args=(self,), seconds=job.every(self.s), id=job.name,
                              max_instances=1, coalesce=True)
        observer: Any = None
        self.log.info("worker_started", pid=os.getpid(), db=str(self.s.db), mode=self.s.chroma_mode,
                      poll_interval_s=self.s.poll_interval_s)
        try:
            if self.metrics_port:
                self.health.serve_metrics(self.metrics_port)
            scheduler.start()
            with contextlib.suppress(OSError):
                observer = watch_database(self.s.db, self.wake)
            self.request_reconcile()  # at start-up: edits and deletes made while we were down
            while not self.stop.is_set():
                delay = self.step()
                if self.stop.is_set():
                    break
                self._sleep(delay)
        finally:
            scheduler.shutdown(wait=False)
            if observer is not None:
                observer.stop()
                observer.join(timeout=5)
            self._shutdown()
        return 0

    def _sleep(self, delay: float) -> None:
        """Wait ``delay`` before the next step, or less when woken: by a file event (debounced: a
        burst of events becomes one step, and the commit that caused them has time to become
        visible), a reconcile asked for, or the health job while Chroma is the cause.

        Degraded, a write to the database cuts the backoff short only while the database is the
        cause (the write may be the fix), and no sooner than a poll interval (a file written on and
        on must not make a busy loop of failing steps). For any other cause (a full disk, an
        endpoint down) a new row fixes nothing: the backoff runs out, as ``worker.loop.backoff`` says."""
        deadline = time.monotonic() + delay
        # A backoff of up to backoff_cap_s outlasts the heartbeat's staleness limit: the heartbeat
        # thread keeps it fresh for the wait (worker.loop.health), and status shows the next retry.
        what = "the next retry (backing off)" if self.health.status.degraded else "the next step"
        with self.health.busy(what, delay + HEARTBEAT_EVERY_S) if delay >= HEARTBEAT_EVERY_S else \
                contextlib.nullcontext():
            while self.wake.wait(max(0.0, deadline - time.monotonic())) and not self.stop.is_set():
                degraded = self.health.status.degraded
                chroma_check = self.health_due.is_set() and not self.health.status.chroma_reachable
                if degraded and not chroma_check and not self.health.source_cause:
                    self.wake.clear()  # nothing this wake brings can end it: wait out the backoff
                    continue
                self.stop.wait(self.s.poll_interval_s if degraded else 0.05)
                break
        self.wake.clear()

    def once(self) -> SyncResult:
        """One full reconcile pass and return (for cron and tests): the whole sequence
        (``SyncPass.whole``) between the schedule's jobs for it, each run whole
        (``worker.loop.schedule.run_whole``: the text index and the connection before, the vector
        copy's upkeep after, when the pass went through)."""
        self._start()
        try:
            run_whole(self, BEFORE_WHOLE, JOBS)
            result = self._sync_pass(self._opened()).whole(_WorkerOpening(self), EVERY_ROW)
            self._pass_ended(True, result)
            if not result.interrupted:
                self._copy_check.soon()  # a full pass leaves the copy checked, as in the loop
                run_whole(self, AFTER_WHOLE, JOBS)
            return result
        finally:
            self._shutdown()

    def _start(self, wait_for_space: bool = False) -> bool:
        """Take the lock and open the records and the embedding store. With ``wait_for_space`` (the
        daemon), a full DATA_DIR is a degraded state retried with the backoff until there is room,
        as it is once running; False when stopped meanwhile."""
        claim(self.s, create=True)  # a worker of another database would replace this one's store
        self._lock.acquire()
        self.health.started()
        while True:
            try:
                if self._state is None:
                    self._state = SyncState(self.s.state_path)
                self._store = EmbeddingStore.open(self.s)
                break
            except (sqlite3.Error, OSError) as exc:
                no_room = no_space(exc, self.s) if wait_for_space else None
                if no_room is None:
                    raise
            self._degrade(no_room)
            self._sleep(self.health.backoff.delay)
            if self.stop.is_set():
                return False
        # the first full pass collects whatever a crash or another process left
        self._collection = StoreCollection(self._store, due=True)
        return True

    def _shutdown(self) -> None:
        self.health.stopping()
        self._text.close()
        self._target.close()
        close_embedder(self._target.embedder)
        self._tail.close()
        self.health.stopped()
        if self._state is not None:
            self._state.close()
            self._state = None
        if self._store is not None:
            self._store.close()
            self._store = None
        self._lock.release()
        self.log.info("worker_stopped")

    # -- one step ------------------------------------------------------------------------------

    def step(self) -> float:
        """Check, sync what is due, record status (the jobs of ``worker.loop.schedule``, in its order).
        Returns how long to wait before the next step."""
        outcome = run_jobs(self, JOBS)
        if outcome.failure is not None:
            return self._failed(outcome.failure)
        self._worked = outcome.worked
        run_jobs(self, JOBS, (Kind.AFTER,))
        if self._resume is not None:
            return 0.0  # a full pass yielded to new rows: their tail pass, then the pass, at once
        # A stamp that just moved gets its second look soon: the commit behind it may not have been
        # visible yet, and waiting a whole poll interval would add up to a second of lag.
        return self.s.poll_interval_s if self._tail.settled else min(self.s.poll_interval_s, 0.1)

    def _failed(self, failure: Failure) -> float:
        """A job failed with an exception its policy handles (``worker.loop.schedule.Policy``): a damaged
        collection is repaired; a failed write to memsync's own files (state.db, the copy, the text
        index, worker.json) degrades when the disk is full (it ends when space returns) and stops the
        worker otherwise (a defect); the rest degrade with backoff.

        An embedding endpoint that is down is no fault of the rows: they stay pending (no attempt
        counted), and the next step retries them after the backoff. StoreRefused (Chroma refused
        the token, has no such tenant or database, or its certificate did not verify) is a setup
        error, yet the daemon retries it with the same backoff rather than exit: the fix is usually
        made on the server and is picked up with no restart, while an exit would have a service
        manager (Restart=on-failure, KeepAlive) restart it every few seconds, logging each time. One
        `chroma_refused` line per distinct reason, the reason in worker.json (`status --check`
        fails). `worker --once`, resync and the other commands exit 2 with the reason instead."""
        exc = failure.error
        if failure.action is Action.REPAIR:
            assert isinstance(exc, StoreDamaged)
            return self._repair(exc)
        if failure.action is Action.DEGRADE_IF_FULL_DISK:
            no_room = no_space(exc, self.s) if isinstance(exc, sqlite3.Error | OSError) else None
            if no_room is None:
                raise exc
            exc = no_room
        assert isinstance(exc, Degrading)
        self._degrade(exc)
        return self.health.backoff.delay

    # -- the jobs' parts (what worker.loop.schedule's table calls) ----------------------------------

    def _opened(self) -> SyncState:
        """The records, open (the ``open`` job ran earlier in the step)."""
        assert self._state is not None
        return self._state

    def _active(self) -> str:
        """The active collection's name (connected: the ``open`` job ran earlier in the step)."""
        collection = self._target.collection
        assert collection is not None
        return collection

    def _check_health(self) -> None:
        """Chroma's heartbeat (the health flag was raised); a new check of the store follows."""
        self.health_due.clear()
        self.health.check_chroma(self._target)
        self._store_due = True

    def _look_for_full(self) -> None:
        """Whether a full pass (from the top) is due: a reconcile asked for, the database replaced,
        the exclusions changed (both always looked at), or records corrected by a check of the store,
        which runs with any of those or when due. Records that no longer say what the store holds
        were just aligned with it: a full pass re-drives exactly those rows."""
        state, _ = self._opened(), self._active()
        replaced, excluded = self._tail.replaced(), self._tail.exclusion_changed()
        full = self.reconcile_due.is_set() or replaced or excluded
        if full or self._store_due:
            full = self._check_store(state) or full
        self._full = full

    def _tail_due(self) -> bool:
        """New rows (the stamp moved), or the upstream-readable store behind ours."""
        state, collection = self._opened(), self._active()
        return self._tail.changed(state, collection, pending=bool(self.health.status.pending_rows)) or \
            self._upstream_behind(state, collection)

    def _tail_pass(self) -> None:
        self._pass(full=False)
        self._compaction.rows_arrived()

    def _compact(self) -> None:
        result = self._compaction.run(self._target, self._opened())
        self.health.status.compactions += 0 if result.interrupted else 1

    def _record_step(self) -> None:
        """The step went through: end a degraded run, publish the status."""
        self.health.recovered()
        self.health.status.index_loading_since_ms = self._target.warmup.loading_since_ms
        self.health.status.index_loaded_in_ms = self._target.warmup.loaded_in_ms
        self.health.publish()

    def _trim(self) -> None:
        if self._worked:
            self._trimmer.worked()
        self._trimmer.maybe()  # what the step freed goes back to the system (worker.process.memory)

    def _full_pass_part(self, restart: bool) -> None:
        """A full pass, from the top (``restart``) or where it yielded. It goes newest first and
        yields to rows committed meanwhile, whose tail pass comes first when it goes on (a first
        sync of hours would otherwise keep every new row waiting for its end)."""
        if restart:
            self.reconcile_due.clear()
            self._resume = None
        else:
            self._pass(full=False)
            self._compaction.rows_arrived()
        self._resume = self._pass(full=True, resume=self._resume).resume
        if self._resume is None:
            self._copy_check.soon()

    def _repair(self, exc: StoreDamaged) -> float:
        """Chroma cannot read a collection: recreate it (``worker.pipeline.target.repair_damaged``), and check
        the store at the next step, whose alignment and full pass re-derive it. Counted as a
        degraded step, so a store that stays unreadable is retried with backoff, not in a loop."""
        try:
            self._target.repair(exc)
        except (StoreUnavailable, NoSpace, StoreRefused) as failed:
            self._degrade(failed)
            return self.health.backoff.delay
        self._store_due = True
        self._degrade(StoreUnavailable(f"{exc.problem}: recreated it empty, re-deriving it from the database"))
        return self.health.backoff.delay

    def _degrade(self, exc: Degrading) -> None:
        if isinstance(exc, StoreUnavailable | StoreRefused):
            self._target.close_store()
        if isinstance(exc, StoreUnavailable):
            exc = explain(exc, self.s)  # a local server says nothing of a full disk: name it
        if isinstance(exc, SourceUnavailable):
            self._tail.lost()
        self.health.degraded(exc)
        self._update_lag()
        self.health.publish(force=True)

    def _ensure_open(self) -> SyncState:
        """Open what a step needs: the source reader, then Chroma (StoreUnavailable when down)."""
        assert self._state is not None
        self._tail.open()
        if self._target.sink is None:
            # A remote model without embedding_dimension is asked for it once, before connecting:
            # one request, which a slow endpoint may take long to answer (the heartbeat goes on).
            embedder = self._target.embedder
            with self.health.busy(waits_on(embedder), embed_bound_s(embedder, 1)):
                _ = embedder.dimension
        # Connecting may start the managed server (up to chroma_start_timeout_s, once per port
        # tried) and makes a few Chroma calls (each up to chroma_timeout_s): the heartbeat goes on.
        connect_s = PORT_ATTEMPTS * self.s.chroma_start_timeout_s + CONNECT_CALLS * self.s.chroma_timeout_s
        with self.health.busy("Chroma (connecting)", connect_s) if self._target.sink is None else \
                contextlib.nullcontext():
            connected = self._target.open(self._state)
        if connected:
            self.health.status.chroma_reachable = True
            self._store_due = True  # a new connection may be to a new (wiped, restored, other) store
            if self._serving and self.s.chroma_mode != "embedded" and self._target.sink is not None:
                # Searches read the server, not this process: have it load the index now.
                self._target.warmup.start(self._target.sink.collection, self._target.embedder.dimension, self.stop)
        return self._state

    def _sync_pass(self, state: SyncState, yield_to: YieldFn | None = None) -> SyncPass:
        """The pass (``worker.pipeline.syncpass``) over this worker's source, records and embedding store; a
        full one yields when ``yield_to`` says rows wait."""
        reader = self._tail.reader
        assert reader is not None
        # worker.json counts the rows of memsync's own pass: no upstream progress.
        options = SyncOptions.from_settings(self.s, self.stop, self.health.pass_progress, yield_to, self.health.busy)
        return SyncPass(self.s, reader, state, self._collection, options, upstream_progress=False)

    def _check_store(self, state: SyncState) -> bool:
        """Check the active collection against the records (aligning them when they differ); True
        when records were corrected, so a full pass must follow."""
        sink = self._target.sink
        assert sink is not None
        self._store_due = False
        checked = self._sync_pass(state).check(sink, self._target.copy, self._target.embedder.model_id,
                                               self._target.upstream)
        self.health.store_checked(checked.own)
        return checked.repaired

    def _mirror(self) -> MirroredSink:
        """The active generation's sink with its copy; a copy write that fails closes the copy (the
        next CopyCheck opens it again; worker.loop.maintenance)."""
        assert self._target.sink is not None
        return MirroredSink(self._target.sink, self._target.copy, on_drop=self._target.close_copy)

    def _pass(self, full: bool, resume: Cursor | None = None) -> SyncResult:
        """A full or tail pass of a step (``SyncPass.run``, the step's own check done before); a
        full one yields to rows committed meanwhile (``SyncResult.resume``: where it goes on)."""
        state, sink = self._state, self._target.sink
        assert state is not None and sink is not None
        # A tail pass between the parts of a full pass syncs memsync's own collection only (the
        # upstream-readable store's pass follows the whole full pass) and keeps its rows count.
        between = not full and self._resume is not None
        if full and resume is None:
            resume = every_kind()  # followed in place as the pass goes (its progress in worker.json)
            self._pass_started(full, (resume, sink.name))
        elif not full and not between:
            self._pass_started(full)
        waiting = (lambda: self._tail.rows_waiting(state, sink.name)) if full else None
        scope = Scope(full=full, resume=resume if full else None, upstream=not between)
        result = self._sync_pass(state, waiting).run(Destination(sink.name, self._mirror()), self._target.embedder,
                                                     lambda: self._target.upstream, scope, self._passed(full))
        self._pass_ended(full, result)
        return result

    def _pass_started(self, full: bool, followed: tuple[Cursor, str] | None = None) -> None:
        """A pass begins; ``followed``: a full pass's cursor and collection, whose progress
        ``worker.json`` reports while it is a first sync."""
        self._upstream_level = False  # until the upstream pass after ours is through (it may fail or stop)
        self.health.pass_started(full)
        if followed is not None and self.health.status.phase == PHASE_FIRST_PASS:
            cursor, collection = followed
            self.health.first_sync = (FirstSyncProgress(cursor, self.s.window_days), lambda: self._tail.reader,
                                      collection)

    def _passed(self, full: bool) -> OnResult:
        """What the worker does as each collection's pass ends."""

        def passed(result: SyncResult, upstream: bool) -> None:
            if not result.interrupted:  # the upstream-readable store is level after its whole pass
                self._upstream_level = self._upstream_level or upstream
            if not upstream:
                self.health.record_pass(result, full)
            elif result.failed_rows:
                self.log.warning("upstream_rows_failed", collection=result.collection, rows=result.failed_rows)

        return passed

    def _pass_ended(self, full: bool, result: SyncResult) -> None:
        state, sink = self._state, self._target.sink
        assert state is not None and sink is not None
        if self._on_searchable is not None:
            self._announce(state, sink.name, full, result)
        if full and self.health.status.store_differs_since_ms is not None:
            # After a repair's pass: the counts as they are now (the next health check would too).
            self.health.store_checked(store_counts(state, sink))
        if result.updated or result.deleted:
            self._compaction.churned()  # new churn: look at it at the next idle step
        self._update_lag()

    def _announce(self, state: SyncState, collection: str, full: bool, result: SyncResult) -> None:
        """Tell ``on_searchable`` once: after the first full pass that went through, or when a
        first sync (newest first) has covered the default window."""
        if full and not result.interrupted and result.resume is None:
            what = f"in step with the database after {time.monotonic() - self._started_at:.0f} s"
        elif self.health.first_sync is not None and self.s.window_days and (reader := self._tail.reader) is not None:
            left = self.health.first_sync[0].snapshot(reader)["window_rows_left"]
            if left:
                return
            what = f"the last {self.s.window_days} days by meaning, older memory follows"
        else:
            return
        assert self._on_searchable is not None
        on_searchable, self._on_searchable = self._on_searchable, None  # once per start
        on_searchable(sum(n for _, _, n, _ in state.doc_counts(collection)), what)

    def _upstream_behind(self, state: SyncState, collection: str) -> bool:
        """The upstream-readable store's records end below memsync's own (its last pass failed or
        was stopped after memsync's own had gone through): a tail pass brings it level. Both record
        every row they pass, documents or not, so level passes leave equal watermarks."""
        up = self._target.upstream
        if up is None or self._upstream_level:
            return False  # level since its last whole pass: no SQL on an idle step
        ours, theirs = state.watermarks(collection), state.watermarks(up.name)
        self._upstream_level = all(theirs.get(kind, 0) >= mark for kind, mark in ours.items())
        return not self._upstream_level

    def _update_lag(self) -> None:
        self.health.update_lag(self._tail.reader, self._state, self._target.collection)


class _WorkerOpening:
    """What ``worker --once`` supplies to the whole pass (``worker.pipeline.syncpass.Opening``): the
    worker's own connection, its repair, and its status kept as the pass goes."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    @property
    def embedder(self) -> Embedder:
        """The worker's embedder."""
        return self._worker._target.embedder

    def open(self) -> Opened:
        """The worker's connection (made again after a repair), the active generation with its copy."""
        self._worker._ensure_open()
        target = self._worker._target
        assert target.sink is not None
        return Opened(target.sink.name, self._worker._mirror(), target.upstream)

    def repair(self, exc: StoreDamaged) -> None:
        """Recreate the unreadable collection and drop the connection (``SyncTarget.repair``)."""
        self._worker._target.repair(exc)

    def ready(self, checked: Checked | None) -> None:
        """The check is reported (``worker.json``) and the full pass begins."""
        assert checked is not None
        self._worker.health.store_checked(checked.own)
        self._worker._pass_started(True)

    def open_upstream(self) -> VectorSink | None:
        """The upstream-readable collection the worker keeps open."""
        return self._worker._target.upstream

    def passed(self, result: SyncResult, upstream: bool) -> None:
        """As for any full pass of the loop."""
        self._worker._passed(True)(result, upstream)
