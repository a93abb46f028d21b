"""A store wiped, replaced or partly lost, and sync records lost or damaged, are repaired without a
manual step in every mode: real `memsync` subprocesses, real `chroma run` servers, the real model.
Each test ends with `verify` clean (the vector copy too)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from memsync.chroma.server import ManagedServer, ServerInfo, chroma_cli, pid_alive
from memsync.config.settings import Settings
from memsync.worker.checks.verify import verify
from tests.conftest import free_port, mixed_records
from tests.system.test_e2e import memsync
from tests.system.test_worker import WorkerProcess, wait_for
from tests.upstream.written import written_db

pytestmark = pytest.mark.slow
ROWS = 6  # per kind: 18 rows, 42 documents


def assert_clean(settings: Settings) -> None:
    report = verify(settings)
    assert report.clean and report.in_chroma == report.expected == 7 * ROWS, report
    assert report.copy_drift == 0


def test_embedded_store_deleted_then_resync_refills_it(settings: Settings) -> None:
    written_db(settings.db, mixed_records(ROWS))
    first = memsync(settings, "resync", "--json")
    assert first.returncode == 0, first.stderr
    shutil.rmtree(settings.chroma_dir)
    again = memsync(settings, "resync", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["added"] == 7 * ROWS
    assert '"store_aligned"' in again.stderr
    assert_clean(settings)


def test_state_db_garbage_is_moved_aside_with_one_line_and_nothing_re_embedded(settings: Settings) -> None:
    written_db(settings.db, mixed_records(ROWS))
    assert memsync(settings, "resync").returncode == 0
    for p in settings.state_path.parent.glob(settings.state_path.name + "-*"):
        p.unlink()
    settings.state_path.write_bytes(os.urandom(8192))
    again = memsync(settings, "resync", "--json")
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr
    assert again.stderr.count('"state_damaged"') == 1
    out = json.loads(again.stdout)
    assert out["embedded"] == 0 and out["unchanged"] == 7 * ROWS
    assert list(settings.state_path.parent.glob("state.db.damaged-*"))
    assert_clean(settings)


def test_managed_server_killed_and_its_directory_wiped_is_restarted_and_refilled(managed: Settings) -> None:
    written_db(managed.db, mixed_records(ROWS))
    worker = WorkerProcess(managed)
    try:
        worker.wait_reconciles(1)
        first = ServerInfo.read(managed.data_dir)
        assert first is not None
        # Hold the worker still so that the wipe happens between the server's death and its restart.
        os.kill(worker.proc.pid, signal.SIGSTOP)
        try:
            os.kill(first.pid, signal.SIGKILL)
            wait_for(lambda: not pid_alive(first.pid), 30, "server gone")
            shutil.rmtree(managed.chroma_dir)
        finally:
            os.kill(worker.proc.pid, signal.SIGCONT)
        status = wait_for(lambda: (s := worker.status()).get("store_repairs", 0) >= 1 and
                          s.get("reconciles", 0) >= 2 and s.get("store_differs_since_ms", 0) is None and s,
                          120, "repair and its reconcile")
        assert status["store_documents"] == status["records_documents"] == 7 * ROWS
        assert status["totals"]["added"] == 2 * 7 * ROWS
        second = ServerInfo.read(managed.data_dir)
        assert second is not None and second.pid != first.pid
        assert worker.stop() == 0
    finally:
        worker.kill()
    assert_clean(managed)


def test_worker_pointed_at_a_fresh_chroma_run_refills_it(tmp_path: Path) -> None:
    port = free_port()

    def chroma_run(path: Path) -> subprocess.Popen[bytes]:
        return subprocess.Popen(chroma_cli("run", "--path", str(path), "--host", "127.0.0.1",
                                 "--port", str(port)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    s = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="http",
                 chroma_port=port, chroma_start_timeout_s=60)
    written_db(s.db, mixed_records(ROWS))
    server = chroma_run(tmp_path / "srv1")
    try:
        assert ManagedServer(s)._wait_healthy(ServerInfo(server.pid, "127.0.0.1", port, ""), server)
        assert memsync(s, "resync").returncode == 0
    finally:
        server.terminate()
        server.wait(timeout=30)
    server = chroma_run(tmp_path / "srv2")  # a fresh server on the same address
    worker: WorkerProcess | None = None
    try:
        assert ManagedServer(s)._wait_healthy(ServerInfo(server.pid, "127.0.0.1", port, ""), server)
        worker = WorkerProcess(s)
        status = wait_for(lambda: (st := worker.status()).get("store_repairs", 0) >= 1 and
                          st.get("reconciles", 0) >= 1 and st, 120, "repair")
        assert status["totals"]["added"] == 7 * ROWS
        assert worker.stop() == 0
        assert_clean(s)
    finally:
        if worker is not None:
            worker.kill()
        server.terminate()
        server.wait(timeout=30)
