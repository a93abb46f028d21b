"""Derived files damaged under a running worker (issue 24, point 5), with real processes: a real
`memsync worker` subprocess and its managed `chroma run`; the vector copy's entries and the text
index's meta file overwritten with garbage on disk. The worker finds both at its next checks,
rebuilds them, and `verify` is clean (the copy too)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memsync.config.formats.text_index import index_path
from memsync.config.formats.vector_copy import ENTRIES_FILE, copy_dir
from memsync.config.settings import Settings
from memsync.worker.state import ACTIVE_COLLECTION, SyncState
from memsync.worker.status import status
from memsync.worker.verify import verify
from tests.conftest import mixed_records
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
        assert worker.proc.poll() is None
        assert worker.stop() == 0
    finally:
        worker.kill()
    report = verify(managed)
    assert report.clean and report.in_chroma == report.expected == 7 * ROWS, report
    assert report.copy_drift == 0 and report.copy_damaged is None
