"""The worker's schedule (``worker.loop.schedule``): one table, dispatched by priority, each job with its
failure policy. The jobs here are fakes over a recording loop; the real ones are driven by the
worker's own tests (tests/worker, tests/system)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from memsync.config.errors import (
    ConfigError,
    EmbeddingUnavailable,
    NoSpace,
    SourceUnavailable,
    StoreDamaged,
    StoreRefused,
    StoreUnavailable,
)
from memsync.config.settings import Settings
from memsync.worker.loop.schedule import (
    AFTER_WHOLE,
    BEFORE_WHOLE,
    JOBS,
    LOOP,
    LOOP_SETTINGS,
    OWN,
    STEP,
    STOPS,
    Action,
    Job,
    Kind,
    Policy,
    run_jobs,
    run_whole,
    timers,
)

ROOT = Path(__file__).resolve().parents[2]


class Loop:
    """A loop whose jobs are due when named in ``due``; each run is recorded."""

    def __init__(self, *due: str) -> None:
        self.due = set(due)
        self.ran: list[str] = []


def job(name: str, kind: Kind, busy: bool = False, fails: BaseException | None = None,
        worked: bool = False, policy: Policy = LOOP) -> Job[Loop]:
    """A fake job: due when the loop says so; its run is recorded, then raises ``fails``."""

    def run(loop: Loop) -> bool:
        loop.ran.append(name)
        if fails is not None:
            raise fails
        return worked

    return Job(name, kind, "when the test says", due=lambda loop: name in loop.due, run=run, busy=busy,
               policy=policy)


TABLE = (
    job("first", Kind.FIRST),
    job("rows", Kind.EXCLUSIVE, busy=True),
    job("idle a", Kind.EXCLUSIVE, busy=True),
    job("idle b", Kind.EXCLUSIVE, busy=True),
    job("check", Kind.ALWAYS),
    job("order", Kind.ALWAYS, busy=True),
    job("after", Kind.AFTER, policy=STOPS),
)


class TestTheTable:
    def test_every_job_of_the_worker_is_named_once(self) -> None:
        names = [j.name for j in JOBS]
        assert len(names) == len(set(names))
        assert set(names) == {
            "reconcile", "health", "file events", "signal relay", "heartbeat", "index warm-up", "metrics",
            "injection listener", "injection warm-up", "health check", "text index step", "open", "store check",
            "full pass part", "tail pass", "copy fill", "store garbage", "compaction", "copy check", "copy order",
            "status", "memory trimmer"}

    def test_the_step_checks_health_then_the_text_index_before_chroma(self) -> None:
        first = [j.name for j in JOBS if j.kind is Kind.FIRST]
        assert first == ["health check", "text index step", "open", "store check"]

    def test_the_rows_come_before_idle_work(self) -> None:
        exclusive = [j.name for j in JOBS if j.kind is Kind.EXCLUSIVE]
        assert exclusive == ["full pass part", "tail pass", "copy fill", "store garbage", "compaction"]
        assert all(j.busy for j in JOBS if j.kind is Kind.EXCLUSIVE)

    def test_copy_check_and_order_run_busy_or_idle_and_only_the_order_makes_a_step_busy(self) -> None:
        always = {j.name: j.busy for j in JOBS if j.kind is Kind.ALWAYS}
        assert always == {"copy check": False, "copy order": True}

    def test_the_timers_are_the_intervals_of_the_settings(self, settings: Settings) -> None:
        s = settings.model_copy(update={"reconcile_interval_s": 123, "health_interval_s": 7})
        assert {j.name: j.every(s) for j in timers()} == {"reconcile": 123, "health": 7}

    def test_the_jobs_of_a_step_share_the_loops_policy_and_the_threads_handle_their_own(self) -> None:
        assert all(j.policy is LOOP for j in JOBS if j.kind in STEP)
        assert all(j.policy is OWN for j in JOBS if j.kind is Kind.THREAD)
        assert all(j.policy is STOPS for j in JOBS if j.kind in (Kind.AFTER, Kind.TIMER))


def worker_timings() -> set[str]:
    """The settings that time the worker: every ``*_interval_s``, and every ``Worker:`` setting in seconds."""
    return {name for name, field in Settings.model_fields.items() if name.endswith("_interval_s") or
            (name.endswith("_s") and (field.description or "").startswith("Worker:"))}


def unnamed_timings(jobs: tuple[Job[Any], ...]) -> set[str]:
    """The worker's timing settings that no job (nor the loop's own wait) names."""
    return worker_timings() - {name for j in jobs for name in j.settings} - set(LOOP_SETTINGS)


def started_threads() -> dict[str, str | None]:
    """Each ``threading.Thread(...)`` the worker process's code starts (worker/, servers/inject_*):
    where, and the name it gives it (None: none)."""
    found: dict[str, str | None] = {}
    for path in sorted([*ROOT.glob("worker/**/*.py"), *ROOT.glob("servers/inject_*.py")]):
        text = path.read_text()
        for call in re.finditer(r"threading\.Thread\(", text):
            named = re.search(r'name="([^"]+)"', text[call.end():call.end() + 300].split("\n\n")[0])
            where = f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, call.start()) + 1}"
            found[where] = named.group(1) if named else None
    return found


def unnamed_threads(jobs: tuple[Job[Any], ...]) -> dict[str, str | None]:
    """The threads started in the worker's code that no THREAD entry names."""
    named = {j.thread for j in jobs if j.kind is Kind.THREAD and j.thread is not None}
    return {where: name for where, name in started_threads().items() if name not in named}


class TestEverythingIsInTheTable:
    """A job cannot be added outside the table unnoticed: its timing setting or its thread would be
    named by no entry."""

    def test_every_timing_setting_of_the_worker_is_named_by_a_job(self) -> None:
        assert {"reconcile_interval_s", "store_audit_interval_s", "vector_copy_check_s"} <= worker_timings()
        assert unnamed_timings(JOBS) == set()
        assert {name for j in JOBS for name in j.settings} | set(LOOP_SETTINGS) <= set(Settings.model_fields)

    @pytest.mark.parametrize(("job", "setting"), [
        ("reconcile", "reconcile_interval_s"), ("store check", "store_audit_interval_s"),
        ("copy check", "vector_copy_check_s"), ("tail pass", "poll_interval_s")])
    def test_a_job_taken_out_of_the_table_leaves_its_setting_unnamed(self, job: str, setting: str) -> None:
        assert unnamed_timings(tuple(j for j in JOBS if j.name != job)) == {setting}

    def test_every_thread_the_worker_starts_is_a_thread_entry(self) -> None:
        found = started_threads()
        assert {"signal-relay", "memsync-heartbeat", "memsync-index-warmup", "memsync-inject-listener",
                "memsync-inject-warm"} <= set(found.values())
        assert unnamed_threads(JOBS) == {}

    def test_a_thread_entry_taken_out_of_the_table_leaves_its_thread_unnamed(self) -> None:
        left = unnamed_threads(tuple(j for j in JOBS if j.name != "index warm-up"))
        assert list(left.values()) == ["memsync-index-warmup"]


class TestWorkerOnce:
    """``worker --once`` runs the table's jobs, their whole way, around its whole pass."""

    def test_its_jobs_are_the_tables_and_each_has_a_whole_run(self) -> None:
        whole = {j.name for j in JOBS if j.whole is not None}
        assert whole == set(BEFORE_WHOLE) | set(AFTER_WHOLE)
        assert BEFORE_WHOLE == ("text index step", "open")
        assert AFTER_WHOLE == ("copy check", "copy fill", "copy order")  # checked (and discarded) before filled

    def test_the_named_jobs_run_their_whole_way_in_the_given_order_when_due(self) -> None:
        def whole(name: str) -> Job[Loop]:
            return Job(name, Kind.ALWAYS, "test", due=lambda loop: name in loop.due, run=lambda loop: None,
                       whole=lambda loop: loop.ran.append(f"{name} whole"))

        table = (whole("a"), whole("b"), whole("c"))
        loop = Loop("a", "c", "b")
        assert run_whole(loop, ("c", "a"), table) == ("c", "a")
        assert loop.ran == ["c whole", "a whole"]
        skipped = Loop("a")
        assert run_whole(skipped, ("b", "a"), table) == ("a",)

    def test_a_failure_is_raised_whatever_the_policy(self) -> None:
        def fails(loop: Loop) -> None:
            raise StoreUnavailable("down")

        with pytest.raises(StoreUnavailable):
            run_whole(Loop(), ("x",), (Job("x", Kind.ALWAYS, "test", whole=fails),))


class TestPriorities:
    def test_only_the_first_due_exclusive_job_runs_and_the_always_jobs_run_after_it(self) -> None:
        loop = Loop("first", "idle a", "idle b", "check")
        outcome = run_jobs(loop, TABLE)
        assert loop.ran == ["first", "idle a", "check"] and outcome.worked and outcome.failure is None

    def test_a_step_with_nothing_to_do_is_idle(self) -> None:
        loop = Loop("first", "check")
        outcome = run_jobs(loop, TABLE)
        assert loop.ran == ["first", "check"] and not outcome.worked

    def test_a_first_job_that_worked_makes_the_step_busy(self) -> None:
        table = (job("first", Kind.FIRST, worked=True), *TABLE[1:])
        assert run_jobs(Loop("first"), table).worked

    def test_a_busy_always_job_makes_an_idle_step_busy(self) -> None:
        assert run_jobs(Loop("order"), TABLE).worked

    def test_after_jobs_run_only_when_asked_for(self) -> None:
        loop = Loop("after", "rows")
        run_jobs(loop, TABLE)
        assert loop.ran == ["rows"]
        run_jobs(loop, TABLE, (Kind.AFTER,))
        assert loop.ran == ["rows", "after"]

    def test_a_new_idle_job_is_one_entry_and_runs_only_when_the_jobs_above_it_have_nothing_to_do(self) -> None:
        table = (*TABLE[:4], job("new", Kind.EXCLUSIVE, busy=True), *TABLE[4:])
        busy = Loop("rows", "new")
        run_jobs(busy, table)
        assert busy.ran == ["rows"]
        idle = Loop("new")
        assert run_jobs(idle, table).worked and idle.ran == ["new"]


class TestFailurePolicies:
    @pytest.mark.parametrize(("error", "action"), [
        (StoreDamaged("unreadable", "memsync_docs"), Action.REPAIR),
        (sqlite3.OperationalError("disk I/O error"), Action.DEGRADE_IF_FULL_DISK),
        (OSError(28, "No space left on device"), Action.DEGRADE_IF_FULL_DISK),
        (StoreUnavailable("down"), Action.DEGRADE),
        (SourceUnavailable("gone"), Action.DEGRADE),
        (EmbeddingUnavailable("endpoint down"), Action.DEGRADE),
        (StoreRefused("token"), Action.DEGRADE),
        (NoSpace("full"), Action.DEGRADE),
    ])
    def test_each_failure_of_a_step_job_has_its_action(self, error: Exception, action: Action) -> None:
        for kind in (Kind.FIRST, Kind.EXCLUSIVE, Kind.ALWAYS):
            table = (job("before", Kind.FIRST), job("fails", kind, fails=error), job("later", Kind.ALWAYS))
            loop = Loop("before", "fails", "later")
            outcome = run_jobs(loop, table)
            assert outcome.failure is not None
            assert (outcome.failure.job, outcome.failure.action, outcome.failure.error) == ("fails", action, error)
            assert loop.ran == ["before", "fails"] and outcome.ran == ("before",)  # the step ends at its failure

    @pytest.mark.parametrize("error", [ConfigError("bad setting"), ValueError("a defect"), KeyError("x")])
    def test_any_other_failure_stops_the_worker(self, error: Exception) -> None:
        with pytest.raises(type(error)):
            run_jobs(Loop("fails"), (job("fails", Kind.EXCLUSIVE, fails=error),))

    def test_a_job_whose_policy_stops_the_worker_raises_what_the_loops_policy_would_degrade(self) -> None:
        with pytest.raises(StoreUnavailable):
            run_jobs(Loop("after"), (job("after", Kind.AFTER, fails=StoreUnavailable("down"), policy=STOPS),),
                     (Kind.AFTER,))

    def test_a_failing_due_is_the_jobs_failure_too(self) -> None:
        def due(loop: Loop) -> bool:
            raise SourceUnavailable("the database cannot be read")

        outcome = run_jobs(Loop(), (Job("tail", Kind.EXCLUSIVE, "rows", due=due),))
        assert outcome.failure is not None and outcome.failure.action is Action.DEGRADE
