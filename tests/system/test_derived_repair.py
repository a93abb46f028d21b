"""Derived files damaged on disk, with real processes: a real `memsync worker` subprocess and its
managed `chroma run`; the vector copy's entries and the text index's meta file overwritten with
garbage, then a segment garbled in place. The worker finds each at its next checks, rebuilds it,
and `verify` is clean (the copy too). A text index garbled in place or without tantivy's meta.json
under the commands: `memsync search` answers from FTS5 and says so, status and verify name the
damage, and `worker --once` and `resync` rebuild it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from memsync.config.formats.text_index import index_path, unreadable
from memsync.config.formats.vector_copy import ENTRIES_FILE, copy_dir
from memsync.config.settings import Settings
from memsync.worker.checks.status import status
from memsync.worker.checks.verify import verify
from memsync.worker.rows.state import ACTIVE_COLLECTION, SyncState
from tests.conftest import mixed_records
from tests.system.test_e2e import memsync
from tests.system.test_worker import WorkerProcess, wait_for
from tests.upstream.written import written_db

pytestmark = pytest.mark.slow
ROWS = 8  # per kind: 24 rows, 56 documents


def garble(path: Path) -> None:
    """Overwrite ``path`` in place with random bytes of its own length."""
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.write(os.urandom(max(size, 64)))


def test_a_running_worker_rebuilds_a_garbled_copy_and_text_index(managed: Settings) -> None:
    written_db(managed.db, mixed_records(ROWS))
    worker = WorkerProcess(managed, MEMSYNC_RECONCILE_INTERVAL_S="3")
    try:
        worker.wait_reconciles(1)
        wait_for(lambda: status(managed).vector_copy.get("complete"), 120, "the copy to be complete")
        with SyncState(managed.state_path) as state:
            active = state.get_meta(ACTIVE_COLLECTION)
        assert active
        garble(copy_dir(managed, active) / ENTRIES_FILE)
        garble(index_path(managed) / "meta.json")
        wait_for(lambda: worker.events("vector_copy_damaged"), 120, "the copy's damage to be found")
        wait_for(lambda: worker.events("text_index_rebuilding"), 120, "the text index's damage to be found")

        def repaired() -> bool:
            report = status(managed)
            return bool(report.vector_copy.get("complete") and not report.vector_copy.get("damaged")
                        and report.text_index.get("answers") == "text index")

        wait_for(repaired, 120, "both rebuilt")
        # Random bytes at an offset of a postings file, size and footer kept: found at the worker's
        # next step (the changed file's checksum), not at the next reconcile.
        rebuilt = len(worker.events("text_index_rebuilding"))
        garble_in_place(next(index_path(managed).glob("*.idx")))
        wait_for(lambda: len(worker.events("text_index_rebuilding")) > rebuilt, 60, "the garbled segment to be found")
        assert "garbled" in worker.events("text_index_rebuilding")[-1]["reason"]
        wait_for(repaired, 120, "the text index rebuilt again")
        # A resync beside the running worker: the worker holds the text index's writer lock, which
        # is no failure and no warning, and the resync leaves the index to it.
        beside = memsync(managed, "resync")
        assert beside.returncode == 0, beside.stderr[-2000:]
        held = [json.loads(line) for line in beside.stderr.splitlines() if '"text_index_held"' in line]
        assert [(e["level"], e["holder"]) for e in held] == [("info", "the worker, which brings it up to date")]
        assert "text_index_failed" not in beside.stderr and "LockBusy" not in beside.stderr
        assert worker.proc.poll() is None
        assert worker.stop() == 0
    finally:
        worker.kill()
    report = verify(managed)
    assert report.clean and report.in_chroma == report.expected == 7 * ROWS, report
    assert report.copy_drift == 0 and report.copy_damaged is None


def garble_in_place(path: Path) -> None:
    """Random bytes at an offset of ``path``, its size and its last bytes (tantivy's footer) kept."""
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.seek(size // 4)
        fh.write(os.urandom(max(1, size // 2)))


def test_the_commands_answer_name_and_rebuild_a_damaged_text_index(managed: Settings) -> None:
    written_db(managed.db, mixed_records(ROWS))
    assert memsync(managed, "worker", "--once").returncode == 0
    path = index_path(managed)
    for damage, repair in ((lambda: garble_in_place(next(path.glob("*.idx"))), ("worker", "--once")),
                           (lambda: (path / "meta.json").unlink(), ("resync",))):
        damage()
        found = memsync(managed, "search", "caching", "--window-days", "0")
        assert found.returncode == 0, found.stderr[-2000:]
        head = found.stdout.splitlines()[0]
        assert "lexical: FTS5 (text index unreadable, rebuilding: " in head and "#" in found.stdout, found.stdout
        assert "Traceback" not in found.stderr and "text-index" not in head  # no path in the reason
        assert path.joinpath("meta.json").exists() is (repair != ("resync",))  # the search created nothing
        named = status(managed).text_index["damaged"]  # the commands' lines: tests/worker/test_derived_repair.py
        assert named and verify(managed).text_index_damaged == named
        done = memsync(managed, *repair)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "text_index_rebuilding" in done.stderr
        assert unreadable(path) is None and status(managed).text_index["answers"] == "text index"
    assert verify(managed).clean
