"""The worker's whole schedule, in one table (:data:`JOBS`): every periodic or idle job, when it
is due, how it ranks, and what its failures do. ``Worker.step`` only dispatches through it.

A step runs the ``FIRST`` jobs in order (the health check, then the text index *before* Chroma:
it keeps the lexical fallback fast while Chroma is down, then the connection, then the store
check that decides whether a full pass is due), then the first due ``EXCLUSIVE`` job (the rows
first, then idle work, highest first: a lower one runs only when every one above had nothing to
do), then every due ``ALWAYS`` job (busy or idle). After a step that did not fail, the ``AFTER``
jobs publish the status and give memory back. ``TIMER`` jobs are APScheduler interval jobs that
only raise a flag (the work happens on the loop's thread); ``THREAD`` entries run beside the loop
on threads of their own and are listed so that the table shows everything the process does (the
threads a job starts inside its own run, like a pass's embedding overlap, are that job's).

**Each timing setting is a job's**: a job names the settings that say when it is due
(``settings``; a ``TIMER``'s first is its interval). The store audit (``store_audit_interval_s``)
is no job of its own: the ``store check`` decides it when it looks at the store (at every health
check, reconcile and new connection), so it is due at most one health interval late. Only the
loop's own wait is no job's (:data:`LOOP_SETTINGS`). ``tests/worker/test_schedule.py`` fails when a
worker setting in seconds or a thread the worker starts is named by no entry.

**worker --once** (``Worker.once``) runs the same jobs, each its ``whole`` way (all of it at once,
no budget, no slice), around its whole pass (``worker.pipeline.syncpass.SyncPass.whole``, the pass
``resync`` runs too): :data:`BEFORE_WHOLE` before it, :data:`AFTER_WHOLE` after it when it went
through (:func:`run_whole`). It has no backoff: a failure ends it, and the command exits with it.

The step is **idle** when no job worked: no exclusive job ran, the text index had nothing to do,
and the copy was not reordered. Idle steps do not ask the memory trimmer to trim.

**Failure policy** (``Policy``: rules in order, the first whose exceptions match decides): a
damaged collection is repaired; a failed write to memsync's own files degrades when the disk is
full and otherwise stops the worker (a defect); Chroma, the database, the embedding endpoint or
the disk unavailable (and Chroma refusing us) degrade with backoff, the rows staying pending.
Anything else stops the worker. A job whose failure must not fail the step (the vector copy's
jobs) catches it itself and says so in its ``when``.

**Why a hand-written step and not APScheduler for the jobs.** APScheduler (3.x) runs each job on
its own pool thread when its trigger fires; it has no notion of "run this one only when nothing
above it had work" nor of a step that stops at its first failure and backs off as a whole. Those
are what this loop needs: one thread owns the SQLite connections, the Chroma client and the
vector copy (none of which may be shared across threads without locks we do not have), the
exclusive jobs are ranked (a full pass before a tail pass before the copy fill before ...), the
step's wait depends on what ran, and ``worker --once``/the tests drive one deterministic step
with no scheduler thread at all. APScheduler keeps what it is good at: the wall-clock intervals
(``TIMER``: reconcile, health), which only raise flags for the next step.

**Adding an idle job**: one entry in :data:`JOBS`, placed by priority among the ``EXCLUSIVE``
entries (or ``ALWAYS`` to run busy or idle), with its ``due`` and ``run`` (a part of its own, like
``worker.loop.maintenance``'s, keeps its state), the ``settings`` that time it, and its ``whole`` run
and place in :data:`AFTER_WHOLE` when ``worker --once`` should do it too; nothing else changes. Test it in
``tests/worker/test_schedule.py`` with a fake loop: due → it runs and the step is busy; a job
above it due → it does not run; its failures → the policy's action.
"""

from __future__ import annotations

import enum
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from memsync.config.errors import (
    EmbeddingUnavailable,
    NoSpace,
    SourceUnavailable,
    StoreDamaged,
    StoreRefused,
    StoreUnavailable,
)
from memsync.config.settings import Settings
from memsync.worker.loop.maintenance import fill_copy

if TYPE_CHECKING:
    from memsync.worker.loop.daemon import Worker


class Kind(enum.Enum):
    """Where a job sits in a step (see the module docstring)."""

    FIRST = "first"  # every step, in order, before the rest
    EXCLUSIVE = "exclusive"  # the first due one runs, instead of the ones below it
    ALWAYS = "always"  # every step when due, after the exclusive one, busy or idle
    AFTER = "after"  # after a step that did not fail
    TIMER = "timer"  # an APScheduler interval job that raises a flag for the next step
    THREAD = "thread"  # a thread of its own beside the loop (not dispatched here)


STEP = (Kind.FIRST, Kind.EXCLUSIVE, Kind.ALWAYS)


class Action(enum.Enum):
    """What a failed job makes of the step."""

    REPAIR = "repair"  # recreate the unreadable collection, then degrade (Worker._repair)
    DEGRADE_IF_FULL_DISK = "degrade if the disk is full, else stop"  # memsync's own files
    DEGRADE = "degrade with backoff"  # rows stay pending, the next step retries after the backoff


@dataclass(frozen=True, slots=True)
class Policy:
    """Rules in order: the first whose exceptions match gives the action; no match stops the worker."""

    rules: tuple[tuple[tuple[type[BaseException], ...], Action], ...] = ()

    def action(self, exc: BaseException) -> Action | None:
        """The action for ``exc``; None: re-raise (the worker stops)."""
        return next((action for types, action in self.rules if isinstance(exc, types)), None)


# StoreDamaged is a StoreUnavailable: its rule comes first.
LOOP = Policy((
    ((StoreDamaged,), Action.REPAIR),
    ((sqlite3.Error, OSError), Action.DEGRADE_IF_FULL_DISK),
    ((StoreUnavailable, SourceUnavailable, EmbeddingUnavailable, StoreRefused, NoSpace), Action.DEGRADE),
))
STOPS = Policy()  # any failure stops the worker
OWN = Policy()  # a thread beside the loop: it handles its own failures (logged), none reaches the loop


L = TypeVar("L")  # the loop the jobs run on: the Worker (a fake one in tests)


def _always(_: object) -> bool:
    return True


def _never(_: object) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class Job(Generic[L]):
    """One entry of the schedule. ``run`` returns True when it did work (the step is not idle);
    ``busy``: a run always counts as work."""

    name: str
    kind: Kind
    when: str  # when it is due, in words
    due: Callable[[L], bool] = _always
    run: Callable[[L], object] = _never
    policy: Policy = LOOP
    busy: bool = False
    settings: tuple[str, ...] = ()  # the settings that say when it is due (a TIMER's first: its interval)
    whole: Callable[[L], object] | None = None  # its run in worker --once: all of it at once (see run_whole)
    thread: str | None = None  # THREAD: the name the worker gives it (None: a library's own thread)

    def every(self, settings: Settings) -> float:
        """A TIMER's interval, seconds: its first setting's value."""
        assert self.kind is Kind.TIMER and self.settings
        return float(getattr(settings, self.settings[0]))


E, A = Kind.EXCLUSIVE, Kind.ALWAYS
JOBS: tuple[Job[Worker], ...] = (
    Job("reconcile", Kind.TIMER, "every reconcile_interval_s; also at start, on SIGUSR1", policy=STOPS,
        run=lambda w: w.request_reconcile(), settings=("reconcile_interval_s",)),
    Job("health", Kind.TIMER, "every health_interval_s (wakes a loop backing off for Chroma)", policy=STOPS,
        run=lambda w: w._request_health(), settings=("health_interval_s",)),
    Job("file events", Kind.THREAD, "watchdog event on the database: wakes the loop (a hint)", policy=OWN),
    Job("signal relay", Kind.THREAD, "per signal: SIGINT/SIGTERM stop (a second: exit now), SIGUSR1 reconcile "
        "(worker.process.signals: the handlers run here, not in the raw handler)", policy=OWN, thread="signal-relay"),
    Job("heartbeat", Kind.THREAD, "while the loop waits on a long call: worker.json (worker.loop.health)", policy=OWN,
        thread="memsync-heartbeat"),
    Job("index warm-up", Kind.THREAD, "after a new connection, looping and not embedded: one query until the "
        "server has loaded the index, 30 tries at most (worker.pipeline.target.IndexWarmup)", policy=OWN,
        thread="memsync-index-warmup"),
    Job("metrics", Kind.THREAD, "per scrape, with --metrics-port (worker.loop.metrics; prometheus_client's "
        "server)", policy=OWN),
    Job("injection listener", Kind.THREAD, "per prompt, on its pool; started by `memsync worker` "
        "(servers.inject_listener: the worker may not import servers), a failure is a warning", policy=OWN,
        thread="memsync-inject-listener"),
    Job("injection warm-up", Kind.THREAD, "once, as the injection listener starts: the searcher's model and "
        "index loaded before the first prompt (servers.inject_listener)", policy=OWN, thread="memsync-inject-warm"),
    Job("health check", Kind.FIRST, "the health flag raised", due=lambda w: w.health_due.is_set(),
        run=lambda w: w._check_health()),
    Job("text index step", Kind.FIRST, "every step, before Chroma (worker.stores.textsync decides: appends at most "
        "every text_index_append_s); --once: a full check of every segment", settings=("text_index_append_s",),
        run=lambda w: w._text_step(), whole=lambda w: w._text_step(force_full=True)),
    Job("open", Kind.FIRST, "every step: the source reader, then Chroma", run=lambda w: w._ensure_open(),
        whole=lambda w: w._ensure_open()),
    Job("store check", Kind.FIRST, "every step looks; checks on reconcile, replaced db, exclusions, health check, "
        "new connection; a check aligns the records by ids when due every store_audit_interval_s",
        settings=("store_audit_interval_s",), run=lambda w: w._look_for_full()),
    Job("full pass part", E, "a full pass due or one that yielded", busy=True,
        due=lambda w: w._full or w._resume is not None, run=lambda w: w._full_pass_part(restart=w._full)),
    Job("tail pass", E, "the database's stamp moved (looked at every step: every poll_interval_s, or woken), or "
        "the upstream store behind", busy=True, settings=("poll_interval_s",),
        due=lambda w: w._tail_due(), run=lambda w: w._tail_pass()),
    Job("copy fill", E, "idle, the vector copy incomplete (errors: logged, copy closed); --once: no budget",
        busy=True, due=lambda w: w._target.copy is not None and not w._target.copy.complete,
        run=lambda w: fill_copy(w._target, w._opened()),
        whole=lambda w: fill_copy(w._target, w._opened(), budget=None)),
    Job("store garbage", E, "idle, after a full pass that changed documents", busy=True,
        due=lambda w: w._collection.due(), run=lambda w: w._collection.run(w._opened())),
    Job("compaction", E, "idle compact_idle_s and enough churn", busy=True, settings=("compact_idle_s",),
        due=lambda w: w._compaction.due(w._opened(), w._active()), run=lambda w: w._compact()),
    Job("copy check", A, "every vector_copy_check_s and after a full pass (errors: logged, copy closed); --once: "
        "the whole copy, vectors too", settings=("vector_copy_check_s",),
        due=lambda w: w._copy_check.due(w._target), run=lambda w: w._copy_check.run(w._target, w._opened()),
        whole=lambda w: w._copy_check.run(w._target, w._opened(), whole=True)),
    Job("copy order", A, "at most once a minute, when enough is dead or out of order (errors: logged)",
        busy=True, due=lambda w: w._copy_order.due(w._target), run=lambda w: w._copy_order.run(w._target),
        whole=lambda w: w._copy_order.run(w._target)),
    Job("status", Kind.AFTER, "after each step that did not fail: recovered, published", policy=STOPS,
        run=lambda w: w._record_step()),
    Job("memory trimmer", Kind.AFTER, "after a busy step, at most every 30 s (worker.process.memory)", policy=STOPS,
        run=lambda w: w._trim()),
)
LOOP_SETTINGS = ("backoff_cap_s",)  # the loop's own wait after a failed step (worker.loop.backoff): no job's

# worker --once (Worker.once), its jobs' whole runs in this order: before its whole pass, the text index
# (every segment checked) and the connection; after it, when it went through, the copy checked whole
# (a damaged one is discarded), then filled, then reordered when due.
BEFORE_WHOLE = ("text index step", "open")
AFTER_WHOLE = ("copy check", "copy fill", "copy order")


@dataclass(frozen=True, slots=True)
class Failure:
    """A job failed with an exception its policy handles."""

    job: str
    action: Action
    error: BaseException


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a step's jobs did: ``worked`` (not idle) and the failure that ended it, if any."""

    worked: bool
    failure: Failure | None = None
    ran: tuple[str, ...] = ()


def run_jobs(loop: L, jobs: tuple[Job[L], ...], kinds: Iterable[Kind] = STEP) -> Outcome:
    """Run the due jobs of ``kinds`` in table order: every due FIRST/ALWAYS/AFTER job, the first due
    EXCLUSIVE one only. The first failure ends the step: its job's policy gives the action, or it
    is re-raised (the worker stops)."""
    wanted, worked, exclusive, ran = set(kinds), False, False, list[str]()
    for job in jobs:
        if job.kind not in wanted or (job.kind is Kind.EXCLUSIVE and exclusive):
            continue
        try:
            if not job.due(loop):
                continue
            result = job.run(loop)
        except Exception as exc:
            action = job.policy.action(exc)
            if action is None:
                raise
            return Outcome(worked, Failure(job.name, action, exc), tuple(ran))
        ran.append(job.name)
        worked = worked or job.busy or result is True
        exclusive = exclusive or job.kind is Kind.EXCLUSIVE
    return Outcome(worked, None, tuple(ran))


def timers() -> tuple[Job[Worker], ...]:
    """The APScheduler interval jobs."""
    return tuple(job for job in JOBS if job.kind is Kind.TIMER)


def run_whole(loop: L, names: tuple[str, ...], jobs: tuple[Job[L], ...]) -> tuple[str, ...]:
    """``worker --once``: the named jobs, in that order, each its ``whole`` way when due; the names
    of those that ran. No policy: a failure is raised (a single pass has no backoff)."""
    by_name, ran = {job.name: job for job in jobs}, list[str]()
    for name in names:
        job = by_name[name]
        assert job.whole is not None, f"{name} has no whole run"
        if job.due(loop):
            job.whole(loop)
            ran.append(name)
    return tuple(ran)
