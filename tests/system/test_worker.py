"""The worker daemon as users run it: a real subprocess beside a writer process, real SQLite,
real `chroma run` servers. Waits are deadlines on observable state, never fixed sleeps."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memsync.chroma.server import INFO_FILE, ServerInfo, chroma_cli, heartbeat, pid_alive
from memsync.config.claude_mem.schema import TABLES, Kind
from memsync.config.formats.worker_status import read_worker_status
from memsync.config.settings import Settings
from memsync.search.textindex import TextIndex
from memsync.worker.checks.verify import verify
from memsync.worker.seed.importer import import_records
from tests.conftest import mixed_records, prompt
from tests.system.test_e2e import ROOT, env_for, free_port
from tests.upstream.written import written_db

pytestmark = pytest.mark.slow


def max_ids(db: Path) -> dict[Kind, int]:
    """The largest id of each kind in a claude-mem database."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return {k: int(conn.execute(f"SELECT coalesce(max(id), 0) FROM {TABLES[k]}").fetchone()[0]) for k in Kind}


def text_index_marks(settings: Settings) -> dict[Kind, int | None] | None:
    """The text index's watermark per kind (None when there is no index for this database)."""
    index = TextIndex.open(settings)
    return None if index is None else {k: index.watermark(k) for k in Kind}


def wait_for(predicate: Callable[[], Any], timeout: float = 120.0, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class WorkerProcess:
    """`memsync worker` in a subprocess; its log lines (JSON) are collected as they come."""

    def __init__(self, settings: Settings, extra_args: list[str] | None = None, **env: str) -> None:
        self.settings = settings
        self.lines: list[dict[str, Any]] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memsync", "worker", *(extra_args or [])], cwd=ROOT, text=True,
            env=env_for(settings, **{"MEMSYNC_POLL_INTERVAL_S": "0.2", "MEMSYNC_BACKOFF_CAP_S": "1",
                                     "MEMSYNC_HEALTH_INTERVAL_S": "0.5", "MEMSYNC_TEXT_INDEX_APPEND_S": "1", **env}),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            try:
                self.lines.append(json.loads(line))
            except ValueError:
                self.lines.append({"event": "text", "text": line})

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.lines if e.get("event") == name]

    def status(self) -> dict[str, Any]:
        return read_worker_status(self.settings.data_dir) or {}

    def wait_reconciles(self, n: int, timeout: float = 120.0) -> dict[str, Any]:
        return wait_for(lambda: self.status() if self.status().get("reconciles", 0) >= n and
                        self.status().get("pid") == self.proc.pid else None, timeout, f"{n} reconciles")

    def wait_caught_up(self, timeout: float = 180.0) -> None:
        """Until every row in the database has a sync record (judged from memsync's own state)."""
        from memsync.worker.checks.status import status

        wait_for(lambda: status(self.settings).pending_rows == 0, timeout, "worker to catch up")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # Where is it waiting? The worker prints every thread's stack on SIGUSR2.
            self.proc.send_signal(signal.SIGUSR2)
            time.sleep(1)  # the dump is asynchronous; nothing to wait on but time
            self.proc.kill()
            self.proc.wait(timeout=30)
            self._close()
            stacks = "".join(e.get("text", "") for e in self.lines if e.get("event") == "text")
            raise AssertionError(f"worker did not stop within {timeout} s; its threads:\n{stacks[-6000:]}") from None
        self._close()
        if code < 0 and -code != sig:  # died of a signal it was not sent (an abort): say what it printed
            text = "".join(e.get("text", "") for e in self.lines if e.get("event") == "text")
            raise AssertionError(f"worker died of signal {-code}; what it printed that is not a log line:\n"
                                 f"{text[-6000:]}\nits last log lines: {self.lines[-5:]}")
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._close()

    def _close(self) -> None:
        self._reader.join(timeout=10)
        if self.proc.stderr is not None and not self._reader.is_alive():
            self.proc.stderr.close()


def chroma_servers(path: Path | None = None) -> set[int]:
    """Pids of running `chroma run` processes (for one store directory when given)."""
    pattern = f"chroma run --path {path} " if path else "chroma run"
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def write_rows(db: Path, total: int, per_txn: int, start: int = 1000) -> subprocess.Popen[str]:
    """A separate writer process appending prompts (and some observations) in small transactions."""
    code = (
        "import sys, json\n"
        "from pathlib import Path\n"
        "from memsync.worker.seed.importer import import_records\n"
        "from tests.conftest import prompt, obs\n"
        "db, total, per, start = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])\n"
        "for base in range(start, start + total, per):\n"
        "    recs = [obs(i) if i % 10 == 0 else prompt(i) for i in range(base, min(base + per, start + total))]\n"
        "    import_records(db, recs)\n"
    )
    return subprocess.Popen([sys.executable, "-c", code, str(db), str(total), str(per_txn), str(start)],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True)


def test_new_rows_from_a_writer_process_are_all_synced(managed: Settings) -> None:
    written_db(managed.db, mixed_records(2))
    worker = WorkerProcess(managed)
    try:
        worker.wait_reconciles(1)
        writer = write_rows(managed.db, total=2000, per_txn=25)
        assert writer.wait(timeout=300) == 0
        worker.wait_caught_up()
        assert worker.status()["degraded"] is False
        wait_for(lambda: text_index_marks(managed) == max_ids(managed.db), 30, "text index caught up")
        assert worker.stop() == 0
    finally:
        worker.kill()
    assert chroma_servers(managed.chroma_dir) == set()
    report = verify(managed)
    assert report.clean and report.expected == 14 + 1800 + 200 * 3


def test_a_new_row_arrives_through_the_tail_within_seconds(managed: Settings) -> None:
    """A row committed while the worker follows the database is synced by the next tail pass, not
    by a full pass (the reconcile timer is 600 s). The lag itself is a benchmark's (bench_lag: p95
    0.11 s); the bound here only tells a tail that works from one that waits for something else."""
    written_db(managed.db, mixed_records(1))
    worker = WorkerProcess(managed, MEMSYNC_POLL_INTERVAL_S="1.0")
    try:
        worker.wait_reconciles(1)
        # The injection listener loads its own model copy after start-up: on a loaded 2-core machine
        # that CPU is not the tail's to measure.
        wait_for(lambda: worker.events("inject_warm") or worker.events("inject_warm_failed"), 120, "warm-up")
        t0 = time.monotonic()
        import_records(managed.db, [prompt(500)])
        wait_for(lambda: worker.status().get("totals", {}).get("added", 0) >= 8, 30, "the new row")
        assert time.monotonic() - t0 < 5.0
        assert worker.status()["reconciles"] == 1  # through the tail: no full pass ran
    finally:
        worker.stop()
        worker.kill()


def status_check(settings: Settings, *args: str) -> tuple[int, dict[str, Any]]:
    """`memsync status --check --json` as a health check script runs it: (exit code, report)."""
    done = subprocess.run([sys.executable, "-m", "memsync", "status", "--check", "--json", *args], cwd=ROOT,
                          env=env_for(settings), capture_output=True, text=True, timeout=120)
    return done.returncode, json.loads(done.stdout)


def test_metrics_endpoint_and_status_check(managed: Settings) -> None:
    written_db(managed.db, mixed_records(2))
    port = free_port()
    worker = WorkerProcess(managed, extra_args=["--metrics-port", str(port)])
    try:
        worker.wait_reconciles(1)
        body = wait_for(lambda: _get(f"http://127.0.0.1:{port}/metrics"), 30, "metrics")
        assert "memsync_worker_up 1.0" in body and "memsync_lag_seconds" in body
        assert 'memsync_documents_total{op="added"} 14.0' in body
        code, report = status_check(managed)
        assert code == 0 and report["healthy"] and report["problems"] == []
        # The worker asked the server for a neighbour at once (the index loads on the first query).
        loaded = wait_for(lambda: (read_worker_status(managed.data_dir) or {}).get("index_loaded_in_ms") is not None,
                          30, "index loaded")
        assert loaded and (read_worker_status(managed.data_dir) or {}).get("index_loading_since_ms") is None
    finally:
        worker.stop()
        worker.kill()
    code, report = status_check(managed)
    assert code == 1 and report["problems"] == ["worker down (stopped)"]
    # A row committed while the worker is down, created long ago: its age is the lag.
    import_records(managed.db, [prompt(900, created_at_epoch=1_000)])
    code, report = status_check(managed, "--max-lag", "60")
    assert code == 1 and report["problems"][0] == "worker down (stopped)" and report["problems"][1].startswith("lag ")


def _get(url: str) -> str | None:
    import httpx

    try:
        return httpx.get(url, timeout=2).text
    except httpx.HTTPError:
        return None


def test_edits_deletes_and_fact_shrink_arrive_at_a_triggered_reconcile(managed: Settings) -> None:
    written_db(managed.db, mixed_records(6))
    worker = WorkerProcess(managed)
    try:
        worker.wait_reconciles(1)
        conn = sqlite3.connect(managed.db)
        with conn:
            conn.execute("UPDATE observations SET narrative = 'edited while running' WHERE id = 1")
            conn.execute("UPDATE observations SET facts = '[\"only one\"]' WHERE id = 2")
            conn.execute("DELETE FROM session_summaries WHERE id = 3")
        conn.close()
        worker.proc.send_signal(signal.SIGUSR1)  # the trigger hook: reconcile now
        worker.wait_reconciles(2)
        totals = worker.status()["totals"]
        assert totals["updated"] == 2 and totals["deleted"] == 1 + 3  # fact_1 of obs 2; summary 3's fields
    finally:
        worker.stop()
        worker.kill()
    assert verify(managed).clean


def test_database_replaced_by_an_older_copy_is_detected_and_reconciled(managed: Settings, tmp_path: Path) -> None:
    written_db(managed.db, mixed_records(4))
    backup = tmp_path / "backup.db"
    shutil.copy(managed.db, backup)
    worker = WorkerProcess(managed)
    try:
        worker.wait_reconciles(1)
        import_records(managed.db, [prompt(i) for i in range(100, 110)])
        worker.wait_caught_up()
        # A restore happens with the agent stopped, whose close moves its WAL into the file. Here the
        # worker's reader keeps the WAL from being removed at that close, so the checkpoint is explicit:
        # a WAL still holding frames when the older copy lands would be replayed onto it by any reader
        # opening it before the WAL is gone (then the rows are there again and nothing is deleted).
        with contextlib.closing(sqlite3.connect(managed.db, timeout=30)) as conn:
            assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0  # not busy
        # Restore the older copy over the database (a new file: new inode, lower max id) and drop the
        # emptied WAL and its index with it.
        os.replace(backup, managed.db)
        for suffix in ("-wal", "-shm"):
            Path(f"{managed.db}{suffix}").unlink(missing_ok=True)
        wait_for(lambda: worker.events("database_replaced"), 30, "replacement detected")
        worker.wait_reconciles(2)
        assert worker.status()["totals"]["deleted"] == 10
    finally:
        worker.stop()
        worker.kill()
    assert verify(managed).clean


def worker_in_mid_sync(managed: Settings) -> WorkerProcess:
    """A worker on 420 documents in small batches, returned once its first batch is logged."""
    written_db(managed.db, mixed_records(60))
    worker = WorkerProcess(managed, MEMSYNC_READ_BATCH_ROWS="10", MEMSYNC_BATCH_SIZE="4")
    try:
        wait_for(lambda: worker.events("sync_batch"), 120, "the first batch")
    except BaseException:
        worker.kill()
        raise
    return worker


def test_sigkill_mid_batch_then_restart_is_exact_and_leaves_no_server(managed: Settings) -> None:
    worker = worker_in_mid_sync(managed)
    try:
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait(timeout=30)
    finally:
        worker.kill()
    orphan = ServerInfo.read(managed.data_dir)
    assert orphan is not None and pid_alive(orphan.pid)  # the server outlived its killed owner...
    again = WorkerProcess(managed)
    try:
        again.wait_reconciles(1)
        # ...and the next worker adopted it (same process) and took over stopping it.
        assert ServerInfo.read(managed.data_dir).pid == orphan.pid  # type: ignore[union-attr]
        assert again.stop() == 0
    finally:
        again.kill()
    assert not pid_alive(orphan.pid) and not (managed.data_dir / INFO_FILE).exists()
    report = verify(managed)
    assert report.clean and report.duplicates == 0 and report.expected == 60 * 7


def test_chroma_down_during_writes_degrades_once_and_recovers_once(tmp_path: Path) -> None:
    port = free_port()
    path = tmp_path / "srv"

    def start_server() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(chroma_cli("run", "--path", str(path), "--host", "127.0.0.1",
                                 "--port", str(port)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: heartbeat("127.0.0.1", port), 60, "chroma server")
        return proc

    s = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="http", chroma_port=port)
    written_db(s.db, mixed_records(2))
    server = start_server()
    worker = WorkerProcess(s)
    try:
        worker.wait_reconciles(1)
        server.terminate()
        server.wait(timeout=30)
        import_records(s.db, [prompt(i) for i in range(200, 240)])  # written while Chroma is down
        wait_for(lambda: worker.status().get("degraded"), 30, "degraded state")
        wait_for(lambda: worker.status().get("consecutive_errors", 0) >= 3, 30, "several failed attempts")
        # The errors can pile up before the rows are committed (the worker notices the dead server
        # while the test still waits for it to exit): wait for the next look, do not assert at once.
        wait_for(lambda: worker.status().get("pending_rows", 0) >= 40, 30, "the new rows counted as pending")
        # memsync's text index follows the database while Chroma is away: it is the fallback's fast path.
        wait_for(lambda: text_index_marks(s) == max_ids(s.db), 30, "text index caught up while Chroma is down")
        server = start_server()
        worker.wait_caught_up()
        wait_for(lambda: worker.events("sync_recovered"), 30, "recovery line")
        assert len(worker.events("sync_degraded")) == 1
        recovered = worker.events("sync_recovered")
        assert len(recovered) == 1 and recovered[0]["errors"] >= 3
        assert worker.stop() == 0
    finally:
        worker.kill()
        try:
            report = verify(s)
        finally:
            server.terminate()
            server.wait(timeout=30)
    assert report.clean and report.duplicates == 0


def test_start_stop_cycles_leak_no_process_and_no_disk(managed: Settings) -> None:
    written_db(managed.db, mixed_records(3))

    def chroma_bytes() -> int:
        return sum(f.stat().st_size for f in managed.chroma_dir.rglob("*") if f.is_file())

    sizes = []
    for _ in range(20):
        worker = WorkerProcess(managed)
        try:
            worker.wait_reconciles(1)
            assert worker.stop() == 0
        finally:
            worker.kill()
        assert chroma_servers(managed.chroma_dir) == set()
        sizes.append(chroma_bytes())
    assert sizes[-1] == sizes[1], sizes  # nothing rewritten after the first sync


def test_managed_server_that_dies_is_restarted_and_the_backlog_drains(managed: Settings) -> None:
    written_db(managed.db, mixed_records(2))
    worker = WorkerProcess(managed)
    try:
        worker.wait_reconciles(1)
        first = ServerInfo.read(managed.data_dir)
        assert first is not None
        os.kill(first.pid, signal.SIGKILL)  # the sidecar dies under the running worker
        import_records(managed.db, [prompt(i) for i in range(300, 320)])
        wait_for(lambda: worker.events("sync_degraded"), 60, "degraded line")
        second = wait_for(lambda: (i := ServerInfo.read(managed.data_dir)) and i.pid != first.pid and i, 60,
                          "a new server")
        worker.wait_caught_up()
        wait_for(lambda: worker.events("sync_recovered"), 30, "recovered line")
        assert pid_alive(second.pid) and heartbeat("127.0.0.1", managed.chroma_port)
        assert worker.stop() == 0
    finally:
        worker.kill()
    assert not pid_alive(second.pid)
    assert verify(managed).clean


def _ignores(pid: int, sig: int) -> bool:
    """Whether the process has ``sig`` set to ignored (its SigIgn mask in /proc)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def test_reconcile_signal_during_start_up_does_not_kill_the_worker(managed: Settings) -> None:
    written_db(managed.db, mixed_records(2))
    worker = WorkerProcess(managed)
    try:
        # As soon as the command ignores SIGUSR1, well before its handler exists (imports, Chroma).
        wait_for(lambda: _ignores(worker.proc.pid, signal.SIGUSR1), 60, "SIGUSR1 ignored")
        assert read_worker_status(managed.data_dir) is None  # not started yet
        worker.proc.send_signal(signal.SIGUSR1)
        status = worker.wait_reconciles(1)
        assert worker.proc.poll() is None and status["totals"]["added"] == 14
        worker.proc.send_signal(signal.SIGUSR1)  # now handled: a reconcile on request
        worker.wait_reconciles(2)
        assert worker.stop() == 0
    finally:
        worker.kill()


def test_second_signal_exits_at_once(managed: Settings) -> None:
    worker = worker_in_mid_sync(managed)
    try:
        worker.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: worker.events("worker_stopping"), 30, "the first signal")
        worker.proc.send_signal(signal.SIGTERM)
        assert worker.proc.wait(timeout=30) == 130
    finally:
        worker.kill()
    info = ServerInfo.read(managed.data_dir)
    if info is not None:  # asked to stop with the worker; adopted by the next start otherwise
        wait_for(lambda: not pid_alive(info.pid), 30, "the server to stop")
    again = subprocess.run([sys.executable, "-m", "memsync", "worker", "--once"], env=env_for(managed),
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert verify(managed).clean


def test_worker_fills_the_vector_copy_of_a_generation_synced_without_one(managed: Settings) -> None:
    written_db(managed.db, mixed_records(40))
    before = subprocess.run([sys.executable, "-m", "memsync", "worker", "--once"], cwd=ROOT, text=True,
                            env=env_for(managed, MEMSYNC_VECTOR_COPY="false"), capture_output=True, timeout=300)
    assert before.returncode == 0, before.stderr
    report = verify(managed)
    assert report.clean and report.copy_drift is None  # no copy yet: what an older memsync left
    worker = WorkerProcess(managed)
    try:
        filled = wait_for(lambda: worker.events("vector_copy_filled"), 120, "the copy filled from Chroma")
        assert filled[0]["documents"] == report.in_chroma
    finally:
        assert worker.stop() == 0
    report = verify(managed)
    assert report.clean and report.copy_drift == 0
