"""End to end with real processes: SIGKILL mid-batch, the managed `chroma run` server, http mode."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from memsync.chroma.server import INFO_FILE, ServerInfo, chroma_cli, heartbeat, pid_alive
from memsync.config.errors import ConfigError
from memsync.config.settings import Settings
from memsync.worker.checks.verify import verify
from scripts.benchlib import settings_env
from tests.conftest import free_port, mixed_records
from tests.upstream.written import written_db

pytestmark = pytest.mark.slow
MEMSYNC = [sys.executable, "-m", "memsync"]
ROOT = Path(__file__).resolve().parents[2]


def env_for(settings: Settings, **extra: str) -> dict[str, str]:
    return settings_env(settings, **extra)


def memsync(settings: Settings, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MEMSYNC, *args], env=env_for(settings, **extra), capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def chroma_ids(settings: Settings) -> list[str]:
    from memsync.chroma import collections as stores

    with stores.connect(settings) as handle:
        col = stores.open_collection(handle.client, settings, "all-MiniLM-L6-v2-int8", 384)
        return list(col.get(include=[])["ids"])


def signal_after_first_batch(settings: Settings, sig: signal.Signals) -> tuple[int, str, str]:
    """Run `memsync resync` on small batches and send ``sig`` when the first batch is logged (the
    next one is then in flight). Returns (exit code, stdout, stderr after the signal)."""
    proc = subprocess.Popen([*MEMSYNC, "resync"], env=env_for(settings, MEMSYNC_READ_BATCH_ROWS="10",
                                                              MEMSYNC_BATCH_SIZE="4"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if '"sync_batch"' in line:
                proc.send_signal(sig)
                break
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out, err


def test_sigkill_mid_batch_then_rerun_is_exact(settings: Settings) -> None:
    written_db(settings.db, mixed_records(40))
    code, _, _ = signal_after_first_batch(settings, signal.SIGKILL)
    assert code == -signal.SIGKILL
    partial = verify(settings)
    assert partial.missing > 0, "killed too late to prove anything"
    rerun = memsync(settings, "resync", "--json")
    assert rerun.returncode == 0, rerun.stderr
    report = verify(settings)
    assert report.clean and report.expected == 280 and report.in_chroma == 280
    ids = chroma_ids(settings)
    assert len(ids) == len(set(ids)) == 280


@pytest.fixture
def managed(managed: Settings) -> Settings:
    """The shared managed settings (tests/conftest.py) with a small database."""
    written_db(managed.db, mixed_records(4))
    return managed


def test_managed_mode_starts_and_stops_its_own_server(managed: Settings) -> None:
    from memsync.chroma.server import LOG_FILE, LOG_ROTATE_BYTES

    log = managed.data_dir / LOG_FILE
    managed.data_dir.mkdir(parents=True)
    log.write_bytes(b"an old server's log\n" * (LOG_ROTATE_BYTES // 20 + 1))
    result = memsync(managed, "resync", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["added"] == 28
    assert not (managed.data_dir / INFO_FILE).exists()
    assert not heartbeat("127.0.0.1", managed.chroma_port)
    verified = memsync(managed, "verify", "--json")
    assert verified.returncode == 0 and json.loads(verified.stdout)["clean"]
    assert not heartbeat("127.0.0.1", managed.chroma_port)
    # The long log was set aside at the start; the server logged no INFO line (one per request).
    assert (managed.data_dir / (LOG_FILE + ".1")).stat().st_size > LOG_ROTATE_BYTES
    text = log.read_text(errors="replace")
    assert "Saving data to" in text and " INFO" not in text


def test_managed_mode_adopts_a_running_server(managed: Settings) -> None:
    from memsync.chroma.server import ManagedServer

    owner = ManagedServer(managed)
    info = owner.ensure()
    try:
        result = memsync(managed, "resync")
        assert result.returncode == 0, result.stderr
        assert pid_alive(info.pid) and heartbeat("127.0.0.1", managed.chroma_port)  # adopted, not stopped
        assert ServerInfo.read(managed.data_dir) == info
    finally:
        owner.stop()
    assert not pid_alive(info.pid)


def test_embedded_mode_refuses_while_a_managed_server_owns_the_store(managed: Settings) -> None:
    from memsync.chroma import collections as stores
    from memsync.chroma.server import ManagedServer

    owner = ManagedServer(managed)
    owner.ensure()
    try:
        with pytest.raises(ConfigError, match="owns"):
            stores.connect(managed.model_copy(update={"chroma_mode": "embedded"}))
    finally:
        owner.stop()


def test_embedded_mode_is_exclusive(settings: Settings) -> None:
    from memsync.chroma import collections as stores

    with stores.connect(settings), pytest.raises(ConfigError, match="single-process"):
        stores.connect(settings)


def test_http_mode_against_a_separate_chroma_server(tmp_path: Path) -> None:
    port = free_port()
    server = subprocess.Popen(chroma_cli("run", "--path", str(tmp_path / "srv"), "--host", "127.0.0.1",
                               "--port", str(port)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        s = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="http",
                     chroma_port=port, chroma_start_timeout_s=60)
        written_db(s.db, mixed_records(3))
        from memsync.chroma.server import ManagedServer

        assert ManagedServer(s)._wait_healthy(ServerInfo(server.pid, "127.0.0.1", port, ""), server)
        result = memsync(s, "resync", "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["added"] == 21
        assert verify(s).clean
        assert server.poll() is None  # http mode never stops a server it did not start
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_http_mode_with_no_server_is_a_clear_error(tmp_path: Path) -> None:
    s = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="http",
                 chroma_port=free_port())
    written_db(s.db, mixed_records(1))
    result = memsync(s, "resync")
    assert result.returncode == 1 and "not reachable" in result.stderr and "Traceback" not in result.stderr


def test_server_left_by_a_killed_memsync_is_taken_over_and_stopped(managed: Settings) -> None:
    """The process that started the managed server dies without stopping it (as after SIGKILL):
    the next memsync adopts the server, takes over its ownership, and stops it when done."""
    start_and_vanish = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from memsync.config.settings import Settings\n"
        "from memsync.chroma.server import ManagedServer\n"
        "s = Settings(db=Path(sys.argv[1]), data_dir=Path(sys.argv[2]), chroma_port=int(sys.argv[3]))\n"
        "ManagedServer(s).ensure()\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", start_and_vanish, str(managed.db), str(managed.data_dir),
                    str(managed.chroma_port)], env=env_for(managed), check=True, timeout=120, cwd=ROOT)
    orphan = ServerInfo.read(managed.data_dir)
    assert orphan is not None and pid_alive(orphan.pid) and not pid_alive(orphan.owner)
    result = memsync(managed, "resync")
    assert result.returncode == 0, result.stderr
    assert not pid_alive(orphan.pid)
    assert not (managed.data_dir / INFO_FILE).exists()


def test_ctrl_c_stops_after_the_current_batch_and_rerun_continues(settings: Settings) -> None:
    written_db(settings.db, mixed_records(40))
    code, out, err = signal_after_first_batch(settings, signal.SIGINT)
    assert code == 1, err
    assert "interrupted" in out and "stopping after the current batch" in err and "Traceback" not in err
    partial = verify(settings)
    assert partial.missing > 0 and partial.orphan == partial.stale == 0  # nothing half-recorded
    rerun = memsync(settings, "resync", "--json")
    assert rerun.returncode == 0 and json.loads(rerun.stdout)["unchanged"] > 0
    assert verify(settings).clean


def test_terminal_gets_a_progress_bar_and_readable_logs(settings: Settings) -> None:
    import pty

    written_db(settings.db, mixed_records(5))
    master, slave = pty.openpty()
    proc = subprocess.Popen([*MEMSYNC, "resync"], env=env_for(settings), stdin=slave, stdout=slave, stderr=slave,
                            cwd=ROOT)
    os.close(slave)
    chunks = []
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=120)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    screen = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, screen
    assert "15/15" in screen and "row/s" in screen and "embedded=" in screen  # tqdm: rows, rate, documents
    assert "sync_batch" in screen and '{"' not in screen  # console log lines, not JSON, on a terminal


def test_scripts_resync_wrapper(settings: Settings) -> None:
    written_db(settings.db, mixed_records(2))
    result = subprocess.run([str(ROOT / "scripts" / "resync"), "--json"], env=env_for(settings), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["added"] == 14
