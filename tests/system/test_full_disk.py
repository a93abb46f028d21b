"""A full disk and a store Chroma can no longer read: real `memsync`
subprocesses and `chroma run` servers on small tmpfs mounts filled by a file the test writes and
then deletes ("space returns"). Every command says where space ran out and how to fix it in one
line, exits 1 and leaves no server behind; the worker degrades and recovers by itself; a store
left unreadable is recreated and re-derived. Each test ends with `verify` clean.

CI runs as root: mounting a tmpfs must work there, so a failed mount fails the test (no skip)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memsync.config.settings import Settings
from memsync.worker.checks.verify import verify
from memsync.worker.loop.backoff import Backoff
from memsync.worker.seed.importer import import_records
from tests.conftest import free_port, mixed_records, prompt
from tests.system.test_e2e import memsync
from tests.system.test_worker import WorkerProcess, chroma_servers, wait_for
from tests.upstream.written import written_db

pytestmark = pytest.mark.slow
ROWS = 6  # per kind: 18 rows, 42 documents
FILLER = "filler.bin"


@contextlib.contextmanager
def tmpfs(path: Path, size_mb: int) -> Iterator[Path]:
    """A tmpfs of ``size_mb`` mounted at ``path`` for the test, unmounted afterwards."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs at {path} (the full-disk tests need root): {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def free_bytes(directory: Path) -> int:
    """Bytes an unprivileged writer can still take on ``directory``'s file system."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def fill(directory: Path, leave_kb: int = 0, settle_s: float = 0.5) -> Path:
    """Write a file that takes every free byte of ``directory``'s file system but ``leave_kb``.

    A worker may be between writing its status file's new copy and renaming it over the old one
    while the file system fills: the rename then frees the old copy's blocks, and each later write
    would reuse what the one before freed (the status never found unwritable). So the filler
    takes what is freed until the free space has held for ``settle_s``."""
    filler = directory / FILLER
    chunk = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as fh:  # unbuffered: nothing left to flush at a full close
        settled_at = time.monotonic()
        while time.monotonic() - settled_at < settle_s:
            remaining, wrote = max(0, free_bytes(directory) - leave_kb * 1024), 0
            try:
                while remaining > 0 and (n := fh.write(chunk[: min(len(chunk), remaining)])):
                    remaining, wrote = remaining - n, wrote + n
            except OSError as exc:  # the last block: the file system keeps some for itself
                assert exc.errno == errno.ENOSPC
            if wrote:  # it took freed space: look again until none is freed for settle_s
                settled_at = time.monotonic()
            time.sleep(0.01)  # a poll of the free space, not a wait for the worker
    return filler


def one_line_no_space(result: subprocess.CompletedProcess[str], where: Path) -> None:
    """The command failed with exit 1 and the one `memsync: no space left on WHERE` line."""
    assert result.returncode == 1, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    messages = [line for line in result.stderr.splitlines() if line.startswith("memsync: ")]
    assert len(messages) == 1 and messages[0].startswith(f"memsync: no space left on {where} "), messages


def assert_clean(settings: Settings, documents: int) -> None:
    report = verify(settings)
    assert report.clean and report.in_chroma == report.expected == documents, report
    assert report.copy_drift == 0


@pytest.fixture
def small_data_dir(managed: Settings, tmp_path: Path) -> Iterator[Settings]:
    """Managed-mode settings whose data directory (state, copy, text index) is a 16 MB tmpfs and
    whose Chroma store is elsewhere."""
    with tmpfs(managed.data_dir, 16):
        yield managed.model_copy(update={"chroma_path": tmp_path / "chroma"})


@pytest.fixture
def small_chroma(managed: Settings, tmp_path: Path) -> Iterator[Settings]:
    """Managed-mode settings whose Chroma store is a 24 MB tmpfs."""
    with tmpfs(tmp_path / "chroma", 24) as path:
        yield managed.model_copy(update={"chroma_path": path})


def test_resync_and_verify_on_a_full_data_dir_say_so_in_one_line_and_leave_no_server(
        small_data_dir: Settings) -> None:
    s = small_data_dir
    written_db(s.db, mixed_records(ROWS))
    filler = fill(s.data_dir)
    for command in ("resync", "verify"):
        one_line_no_space(memsync(s, command), s.data_dir)
        assert not chroma_servers(s.chroma_dir), f"{command} left a Chroma server behind"
    status = memsync(s, "status")
    assert "Traceback" not in status.stderr and status.returncode in (0, 1), status.stderr[-2000:]
    filler.unlink()  # space returns: the same commands just work
    again = memsync(s, "resync")
    assert again.returncode == 0, again.stderr[-2000:]
    assert memsync(s, "verify").returncode == 0
    assert not chroma_servers(s.chroma_dir)
    assert_clean(s, 7 * ROWS)


def fill_under_a_worker(s: Settings, full: Path, new_rows: int, reason: str,
                        while_full: Callable[[WorkerProcess], None] | None = None, **env: str) -> None:
    """A worker that caught up; then ``full`` filled while ``new_rows`` prompts arrive: it must
    degrade with ``reason`` (a prefix) and stay up (``while_full`` checks more meanwhile), then
    recover and catch up once the filler is deleted."""
    written_db(s.db, mixed_records(ROWS))
    worker = WorkerProcess(s, **env)
    try:
        worker.wait_reconciles(1)
        filler = fill(full)
        import_records(s.db, [prompt(100 + i) for i in range(new_rows)])
        degraded = wait_for(lambda: worker.events("sync_degraded"), 120, "the worker to degrade")
        assert degraded[0]["reason"].startswith(reason), degraded
        assert worker.proc.poll() is None, "the worker exited on a full disk"
        if while_full is not None:
            while_full(worker)
        filler.unlink()
        wait_for(lambda: worker.events("sync_recovered"), 180, "the worker to recover")
        worker.wait_caught_up()
        assert worker.stop() == 0
    finally:
        worker.kill()
    assert not [e for e in worker.lines if e.get("event") == "text" and "Traceback" in e.get("text", "")]


def most_failures(seconds: float, interval: float, cap: float) -> int:
    """The most failed steps a worker backing off (``worker.loop.backoff``) can make in ``seconds``
    after its first failure: steps take time too, so a real worker makes at most this many."""
    backoff, spent = Backoff(interval, cap), 0.0
    backoff.fail()
    while spent + backoff.delay <= seconds:
        spent += backoff.delay
        backoff.fail()
    return backoff.failures


def test_worker_degrades_on_a_full_data_dir_and_recovers_when_space_returns(small_data_dir: Settings) -> None:
    """While DATA_DIR is full and rows keep arriving (a file event each), the worker retries with
    its backoff, not at every row; worker.json cannot be written, yet status says it is up and
    degraded, why, and when it retries next, from the record kept in place in worker.heartbeat."""
    s = small_data_dir
    poll, cap = 0.2, 4.0
    reason = f"no space left on {s.data_dir} (DATA_DIR, "

    def backs_off_and_says_so(worker: WorkerProcess) -> None:
        first = time.monotonic()  # the first failure was before this
        for i in range(30):  # rows keep arriving for 6 s: a file event every 0.2 s
            import_records(s.db, [prompt(500 + i)])
            time.sleep(0.2)  # the pace of a writer, not a wait for the worker
        shown = memsync(s, "status", "--json")
        elapsed = time.monotonic() - first
        assert shown.returncode == 0, shown.stderr[-2000:]
        w = json.loads(shown.stdout)["worker"]
        assert w["up"] and w["degraded"] and w["last_error"].startswith(reason), w
        assert w["status_unwritable"] and "No space left" in w["status_unwritable"], w
        assert isinstance(w["next_retry_ms"], int)
        assert 2 <= w["consecutive_errors"] <= most_failures(elapsed + 1.0, poll, cap), (w, elapsed)
        text = memsync(s, "status").stdout
        assert "degraded: no space left on" in text and "next retry at" in text, text
        assert "read from the record the worker keeps in place in worker.heartbeat" in text, text

    fill_under_a_worker(s, s.data_dir, 40, reason, backs_off_and_says_so,
                        MEMSYNC_POLL_INTERVAL_S=str(poll), MEMSYNC_BACKOFF_CAP_S=str(cap))
    assert_clean(s, 7 * ROWS + 70)


def test_worker_on_a_full_chroma_disk_names_it_recovers_and_any_damage_is_repaired(small_chroma: Settings) -> None:
    s = small_chroma
    fill_under_a_worker(s, s.chroma_dir, 400, f"no space left on {s.chroma_dir} (the Chroma path, ")
    # What the full disk left on disk is read by a new server: a store it cannot read is repaired
    # by the next pass (store_damaged, then store_aligned), never left failing.
    once = memsync(s, "worker", "--once")
    assert once.returncode == 0, once.stderr[-3000:]
    assert_clean(s, 7 * ROWS + 400)


def damage_hnsw(chroma_dir: Path) -> Path:
    """Cut the collection's HNSW metadata file in half, as a disk that filled up mid-write does."""
    pickles = sorted(chroma_dir.glob("*/index_metadata.pickle"), key=lambda p: p.stat().st_size)
    assert pickles, f"no HNSW segment under {chroma_dir}"
    damaged = pickles[-1]
    data = damaged.read_bytes()
    damaged.write_bytes(data[: len(data) // 2])
    return damaged


def test_a_store_chroma_cannot_read_is_named_then_recreated_and_re_derived(managed: Settings) -> None:
    s = managed
    written_db(s.db, mixed_records(ROWS) + [prompt(100 + i) for i in range(1200)])  # enough to persist HNSW
    assert memsync(s, "resync").returncode == 0
    documents = 7 * ROWS + 1200
    damage_hnsw(s.chroma_dir)
    told = memsync(s, "verify")
    assert told.returncode == 1 and "Traceback" not in told.stderr, told.stderr[-2000:]
    assert "cannot read collection" in told.stderr and "memsync resync" in told.stderr, told.stderr[-2000:]
    once = memsync(s, "worker", "--once")
    assert once.returncode == 0, once.stderr[-3000:]
    assert '"store_damaged"' in once.stderr and '"store_aligned"' in once.stderr
    assert_clean(s, documents)
    assert not chroma_servers(s.chroma_dir)


def test_the_daemon_recreates_a_store_it_cannot_read(managed: Settings) -> None:
    s = managed.model_copy(update={"chroma_port": free_port()})
    written_db(s.db, mixed_records(ROWS) + [prompt(100 + i) for i in range(1200)])
    assert memsync(s, "resync").returncode == 0
    damage_hnsw(s.chroma_dir)
    worker = WorkerProcess(s)
    try:
        wait_for(lambda: worker.events("store_damaged"), 120, "the damage to be found")
        wait_for(lambda: worker.events("store_aligned"), 120, "the records aligned with the new collection")
        worker.wait_caught_up()
        wait_for(lambda: worker.events("sync_recovered"), 120, "the worker to recover")
        assert worker.stop() == 0
    finally:
        worker.kill()
    assert_clean(s, 7 * ROWS + 1200)


def test_a_worker_started_on_a_full_data_dir_waits_for_space(small_data_dir: Settings) -> None:
    """A worker (re)started while DATA_DIR is full does not exit: it is degraded, says so (status
    reads the record it keeps in place), retries with its backoff and starts once space returns."""
    s = small_data_dir
    written_db(s.db, mixed_records(ROWS))
    worker = WorkerProcess(s)
    try:
        worker.wait_reconciles(1)
        assert worker.stop() == 0
    finally:
        worker.kill()
    filler = fill(s.data_dir)
    import_records(s.db, [prompt(100 + i) for i in range(10)])
    worker = WorkerProcess(s)
    try:
        degraded = wait_for(lambda: worker.events("sync_degraded"), 120, "the worker to degrade")
        assert degraded[0]["reason"].startswith(f"no space left on {s.data_dir} (DATA_DIR, "), degraded
        assert worker.proc.poll() is None, "the worker exited on a full disk"
        shown = memsync(s, "status")  # the records cannot be opened: one error line, and the worker's state
        one_line_no_space(shown, s.data_dir)
        assert "degraded: no space left on" in shown.stdout and "next retry at" in shown.stdout, shown.stdout
        assert "worker.heartbeat" in shown.stdout, shown.stdout
        filler.unlink()
        worker.wait_reconciles(1)
        worker.wait_caught_up()
        assert worker.stop() == 0
    finally:
        worker.kill()
    assert_clean(s, 7 * ROWS + 10)
