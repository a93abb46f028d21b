"""Random bytes over the vector copy's vectors file (its size unchanged) under a real `memsync
worker` subprocess and its managed `chroma run`: the entries' checksum never covered the vectors,
so the damage changed rankings unseen. Now `status` and `verify` (real commands) name it, the
worker's copy check finds it within one cycle (``vector_copy_check_s``; no reconcile runs in
between) and rebuilds the copy from Chroma, and `verify` is clean again."""

from __future__ import annotations

import signal

import pytest

from memsync.config.formats.vector_copy import Manifest, copy_dir, vectors_file
from memsync.config.settings import Settings
from memsync.worker.checks.status import status
from memsync.worker.rows.state import ACTIVE_COLLECTION, SyncState
from tests.conftest import mixed_records
from tests.system.test_derived_repair import garble
from tests.system.test_e2e import memsync
from tests.system.test_worker import WorkerProcess, wait_for
from tests.upstream.written import written_db

pytestmark = pytest.mark.slow
ROWS = 8  # per kind: 24 rows, 56 documents
CHECK_S = 2  # the copy check's cycle here; the reconcile stays at its default (600 s)


def test_a_running_worker_finds_garbled_vectors_in_one_check_cycle_and_rebuilds_the_copy(managed: Settings) -> None:
    written_db(managed.db, mixed_records(ROWS))
    worker = WorkerProcess(managed, MEMSYNC_VECTOR_COPY_CHECK_S=str(CHECK_S))
    try:
        reconciles = worker.wait_reconciles(1)["reconciles"]
        wait_for(lambda: status(managed).vector_copy.get("complete"), 120, "the copy to be complete")
        with SyncState(managed.state_path) as state:
            active = state.get_meta(ACTIVE_COLLECTION)
        assert active
        directory = copy_dir(managed, active)
        manifest = Manifest.read(directory)
        assert manifest is not None and manifest.blocks
        path = directory / vectors_file(manifest.layout)
        size = path.stat().st_size
        # The worker is held still while the damage is written and the commands run, so that they
        # see it before its check does (which would rebuild the copy under them).
        worker.proc.send_signal(signal.SIGSTOP)
        try:
            garble(path)
            assert path.stat().st_size == size
            named = f"({path.name} does not match its checksum (block 0: vectors 0-{manifest.count - 1})"
            st = memsync(managed, "status")
            assert f"vector copy: damaged {named}" in st.stdout, st.stdout + st.stderr
            ver = memsync(managed, "verify")
            assert ver.returncode == 1 and f"vector copy damaged {named}" in ver.stdout, ver.stdout + ver.stderr
        finally:
            worker.proc.send_signal(signal.SIGCONT)
        found = wait_for(lambda: worker.events("vector_copy_damaged"), 30 * CHECK_S, "the check to find it")
        assert path.name in found[0]["reason"]
        wait_for(lambda: worker.events("vector_copy_filled"), 60, "the copy to be filled again")

        def rebuilt() -> bool:
            copy = status(managed).vector_copy
            return bool(copy.get("complete") and not copy.get("damaged"))

        wait_for(rebuilt, 60, "the copy rebuilt")
        assert worker.status()["reconciles"] == reconciles  # found by the copy check, not by a reconcile
        assert worker.proc.poll() is None
        assert worker.stop() == 0
    finally:
        worker.kill()
    ver = memsync(managed, "verify")
    assert ver.returncode == 0 and "damaged" not in ver.stdout, ver.stdout + ver.stderr
