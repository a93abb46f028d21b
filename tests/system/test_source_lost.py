"""A real `memsync worker` whose source database goes bad while it runs, and one in a long first
pass. The database is the test's own copy of a claude-mem file; the
worker never writes it. Waits are deadlines on worker.json, never fixed sleeps."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memsync.config.settings import Settings
from memsync.worker.checks.verify import verify
from tests.conftest import mixed_records
from tests.system.test_e2e import memsync
from tests.system.test_providers import remote
from tests.system.test_worker import WorkerProcess, status_check, wait_for
from tests.upstream.written import written_db
from tests.worker.test_source_lost import foreign_db, replace_with

pytestmark = pytest.mark.slow

CAP_S = 1.0  # WorkerProcess's MEMSYNC_BACKOFF_CAP_S
POLL_S = 0.2  # WorkerProcess's MEMSYNC_POLL_INTERVAL_S: the backoff's first delay


def degraded_with(worker: WorkerProcess, text: str) -> dict[str, Any]:
    """worker.json once it says degraded because of ``text``."""
    def seen() -> dict[str, Any] | None:
        st = worker.status()
        return st if st.get("degraded") and text in str(st.get("last_error")) else None

    return wait_for(seen, 60, f"degraded: {text}")


def recovered(worker: WorkerProcess, reconciles: int) -> None:
    """Until the worker is no longer degraded and has run the full pass asked for on recovery."""
    wait_for(lambda: not worker.status().get("degraded") and worker.status().get("reconciles", 0) >= reconciles,
             90, "recovery and its reconcile")


def retries_per_second_at_cap(worker: WorkerProcess, retries: int = 3) -> float:
    """Failed steps per second, counted in worker.json (``consecutive_errors``) once the backoff
    reached its cap, over the time ``retries`` more of them took."""
    def at_cap() -> dict[str, Any] | None:
        st = worker.status()
        return st if st.get("retry_in_s") == CAP_S else None

    start = wait_for(at_cap, 60, "the cap")
    t0 = time.monotonic()
    wait_for(lambda: worker.status().get("consecutive_errors", 0) >= start["consecutive_errors"] + retries,
             60, f"{retries} more retries")
    return retries / (time.monotonic() - t0)


@contextlib.contextmanager
def worker_on_a_good_copy(settings: Settings, tmp_path: Path,
                          degradations: int) -> Iterator[tuple[WorkerProcess, Path]]:
    """A worker caught up on a small database, and a good copy of that database to put back. On
    exit: exactly ``degradations`` degraded runs each ended by one recovery, a clean stop, and
    ``verify`` clean."""
    written_db(settings.db, mixed_records(5))
    good = Path(shutil.copy(settings.db, tmp_path / "good.db"))
    worker = WorkerProcess(settings)
    try:
        worker.wait_reconciles(1)
        yield worker, good
        assert worker.stop() == 0
        # After the stop: its log lines are then all read (worker.json says "recovered" before the
        # reader thread has always seen the log line that says so).
        assert len(worker.events("sync_degraded")) == len(worker.events("sync_recovered")) == degradations
    finally:
        worker.kill()
    assert verify(settings).clean


def test_a_database_truncated_in_place_degrades_the_worker_until_a_good_copy_is_back(
        settings: Settings, tmp_path: Path) -> None:
    with worker_on_a_good_copy(settings, tmp_path, degradations=1) as (worker, good):
        os.truncate(settings.db, 0)
        degraded_with(worker, "not a claude-mem database")  # after "malformed" from the open reader
        assert worker.proc.poll() is None
        # status cannot read the database: its one error line, and still the worker's state
        shown = memsync(settings, "status")
        assert shown.returncode != 0 and "Traceback" not in shown.stderr, shown.stderr[-2000:]
        assert [line for line in shown.stderr.splitlines() if line.startswith("memsync: ")], shown.stderr
        assert "worker: up (following), degraded: " in shown.stdout and "next retry at " in shown.stdout, shown
        replace_with(settings.db, good)
        recovered(worker, reconciles=2)


def test_garbage_then_a_foreign_sqlite_file_degrade_with_backoff_and_recover(
        settings: Settings, tmp_path: Path) -> None:
    with worker_on_a_good_copy(settings, tmp_path, degradations=2) as (worker, good):
        (tmp_path / "garbage").write_bytes(os.urandom(16384))
        replace_with(settings.db, tmp_path / "garbage")
        first = degraded_with(worker, "file is not a database")
        # The delay doubles from the poll interval with each failure in a row (a test process slowed
        # by a loaded machine may first look after the third, at the cap: the formula holds there too).
        assert first["retry_in_s"] == min(CAP_S, POLL_S * 2 ** (first["consecutive_errors"] - 1))
        # The backoff grows to its cap and holds there: about one retry a second, where file
        # events from the worker's own opens once made ~18.
        assert retries_per_second_at_cap(worker) < 2.0
        assert worker.proc.poll() is None
        replace_with(settings.db, good)
        recovered(worker, reconciles=2)

        replace_with(settings.db, foreign_db(tmp_path / "foreign.db"))
        st = degraded_with(worker, "changed under the worker: not a claude-mem database")
        wait_for(lambda: worker.status().get("consecutive_errors", 0) >= st["consecutive_errors"] + 2, 30,
                 "more retries of the foreign file")
        assert worker.proc.poll() is None  # degraded, not exited (it exited 2 before)
        replace_with(settings.db, good)
        recovered(worker, reconciles=3)


def test_status_check_calls_a_worker_in_its_long_first_pass_up(settings: Settings, openai_server: Any) -> None:
    """Every embedding request answered after 2 s: a first pass of many seconds. worker.json is
    there from the start, says ``first pass`` and its rows done (written between batches), and
    ``status --check`` exits 0 though the rows' age is far over --max-lag."""
    written_db(settings.db, mixed_records(12))  # ~15 requests of 2 s: the check runs well inside the pass
    s = remote(settings, openai_server, embedding_batch_size=4)
    openai_server.faults(delay_s=2.0, count=-1)
    worker = WorkerProcess(s)
    try:
        wait_for(lambda: worker.status().get("pid") == worker.proc.pid, 60, "worker.json from the start")
        wait_for(lambda: worker.status().get("phase") == "first pass" and worker.status().get("pass_rows_done"),
                 90, "first pass progress in worker.json")
        code, report = status_check(s)
        assert report["worker"]["phase"] == "first pass", report  # still in it: the check saw it
        assert code == 0 and report["healthy"] and report["worker"]["up"], report
        openai_server.faults()  # answers at full speed again
        worker.wait_reconciles(1)
        assert worker.status()["phase"] == "following"
        code, report = status_check(s)
        assert code == 0 and report["worker"]["phase"] == "following", report
        assert worker.stop() == 0
    finally:
        worker.kill()
    assert verify(s).clean
