"""The managed server's record checked against the process table:
memsync never signals a process it did not start for this data directory, never starts a second
`chroma run` on a store that has one, and never leaves a server behind whose record it could not
write. Real processes: `sleep`, a python whose command line is a `chroma run` (``fake_chroma_run``)
and real `chroma run` servers."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from memsync.chroma import collections as stores
from memsync.chroma.process import chroma_process, chroma_processes, parse_argv, parse_ps_line
from memsync.chroma.server import INFO_FILE, ManagedServer, ServerInfo, chroma_cli, heartbeat, live_server, pid_alive
from memsync.config.errors import StoreUnavailable
from memsync.config.settings import Settings
from memsync.main import main
from tests.conftest import fake_chroma_run, free_port, kill_managed_server, make_db, mixed_records

STORE = "/Users/me/Library/Application Support/memsync/chroma"


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A program of the same user that memsync did not start (what a reused pid belongs to)."""
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def free(tmp_path: Path) -> Iterator[Settings]:
    """Managed mode on a free port (the default), a short start timeout; servers killed at the end."""
    s = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="managed",
                 chroma_start_timeout_s=20)
    s.data_dir.mkdir(parents=True)
    yield s
    kill_managed_server(s.data_dir)


def servers_on(s: Settings) -> list[int]:
    """The pids of every `chroma run` on the settings' store, from the process table."""
    return [p.pid for p in chroma_processes(s.chroma_dir)]


class TestCommandLines:
    def test_linux_argv_gives_path_host_and_port(self) -> None:
        argv = ["/venv/bin/python3", "/venv/bin/chroma", "run", "--path", "/a b/chroma", "--host", "127.0.0.1",
                "--port", "8123"]
        assert parse_argv(argv) == ("/a b/chroma", "127.0.0.1", 8123)
        assert parse_argv(["chroma", "run", "--path=/x", "--port=9"]) == ("/x", "localhost", 9)

    def test_the_managed_servers_own_command_line_is_recognised(self) -> None:
        """memsync starts its server as ``python -c <the Rust CLI> chroma run ...`` (chroma_cli):
        the process table must still read it as a `chroma run` on its store, on Linux and from ps."""
        argv = chroma_cli("run", "--path", STORE, "--host", "127.0.0.1", "--port", "8123")
        assert argv[0] == sys.executable and "\n" not in " ".join(argv)
        assert parse_argv(argv) == (STORE, "127.0.0.1", 8123)
        proc = parse_ps_line(f"  812   1 Wed Nov 25 13:04:47 2026 {' '.join(argv)}")
        assert proc is not None and (proc.path, proc.host, proc.port) == (STORE, "127.0.0.1", 8123)

    def test_other_programs_are_not_chroma_runs(self) -> None:
        assert parse_argv(["sleep", "300"]) is None
        assert parse_argv(["/venv/bin/chroma", "utils", "--path", "/x"]) is None
        assert parse_argv(["/venv/bin/chroma", "run", "--port", "8000"]) is None  # no store named
        assert parse_argv(["vim", "chroma", "run", "--path", "/x", "--port", "no"]) is None

    def test_macos_ps_line_keeps_spaces_in_the_store_path(self) -> None:
        line = (f"  812   1 Wed Nov 25 13:04:47 2026 /Users/me/.venv/bin/python3 /Users/me/.venv/bin/chroma run "
                f"--path {STORE} --host 127.0.0.1 --port 8000")
        proc = parse_ps_line(line)
        assert proc is not None and (proc.pid, proc.parent, proc.started) == (812, 1, "Wed Nov 25 13:04:47 2026")
        assert (proc.path, proc.host, proc.port) == (STORE, "127.0.0.1", 8000) and proc.serves(Path(STORE))
        assert parse_ps_line("  813   1 Wed Nov 25 13:04:48 2026 /bin/sleep 300") is None


@pytest.mark.slow
class TestRecordIdentity:
    def test_a_live_chroma_run_on_the_store_is_identified(self, free: Settings) -> None:
        port = free_port()
        with fake_chroma_run(free.chroma_dir, port) as proc:
            found = chroma_process(proc.pid)
            assert found is not None and found.serves(free.chroma_dir) and found.port == port and found.started
            assert found.parent == os.getpid() and servers_on(free) == [proc.pid]
            assert ServerInfo(proc.pid, "127.0.0.1", port, str(free.chroma_dir), started=found.started
                              ).running(free.chroma_dir)
            assert ServerInfo(proc.pid, "127.0.0.1", port, str(free.chroma_dir)).running(free.chroma_dir)  # old record
            assert not found.serves(free.data_dir / "other")

    def test_the_right_command_line_with_another_start_time_is_stale(self, free: Settings) -> None:
        """A pid reused by another `chroma run` on the store (after a reboot) is not the one recorded."""
        with fake_chroma_run(free.chroma_dir, free_port()) as proc:
            started = chroma_process(proc.pid).started  # type: ignore[union-attr]
            stale = ServerInfo(proc.pid, "127.0.0.1", 1, str(free.chroma_dir), started=started + "0")
            assert not stale.running(free.chroma_dir)
            stale.write(free.data_dir)
            ManagedServer(free)._terminate_server(stale)  # what ensure/stop would do with it: nothing
            assert proc.poll() is None

    def test_another_program_under_the_recorded_pid_is_stale(self, free: Settings,
                                                             sleeper: subprocess.Popen[bytes]) -> None:
        assert chroma_process(sleeper.pid) is None
        assert not ServerInfo(sleeper.pid, "127.0.0.1", 1, str(free.chroma_dir)).running(free.chroma_dir)

    def test_a_chroma_run_on_another_store_is_stale(self, free: Settings, tmp_path: Path) -> None:
        with fake_chroma_run(tmp_path / "elsewhere", free_port()) as proc:
            assert not ServerInfo(proc.pid, "127.0.0.1", 1, str(free.chroma_dir)).running(free.chroma_dir)
            assert servers_on(free) == []

    def test_an_unrecorded_server_that_does_not_answer_is_refused_not_doubled(self, free: Settings) -> None:
        s = free.model_copy(update={"chroma_start_timeout_s": 0.3})
        with fake_chroma_run(s.chroma_dir, free_port()) as proc:
            (s.data_dir / INFO_FILE).write_text("{garbage")
            with pytest.raises(StoreUnavailable, match=f"pid {proc.pid}.*without a record.*does not answer"):
                ManagedServer(s).ensure()
            assert proc.poll() is None and servers_on(s) == [proc.pid]  # not signalled, none started


@pytest.mark.slow
class TestStaleRecordNeverSignalled:
    """Point 1: a record whose pid now belongs to another program (a SIGKILLed worker, a reboot)."""

    @pytest.mark.parametrize("fixed_port", [False, True], ids=["free-port", "fixed-port"])
    def test_ensure_starts_its_own_server_and_leaves_the_program_alone(
            self, free: Settings, sleeper: subprocess.Popen[bytes], fixed_port: bool) -> None:
        # fixed port: the record's other port once sent the pid to _move_to_fixed_port's SIGTERM;
        # free port: the pid was waited on for chroma_start_timeout_s, then terminated as hung.
        s = free.model_copy(update={"chroma_port": free_port()}) if fixed_port else free
        ServerInfo(sleeper.pid, "127.0.0.1", free_port(), str(s.chroma_dir), owner=sleeper.pid,
                   started="1+1").write(s.data_dir)
        server = ManagedServer(s)
        try:
            info = server.ensure()
            assert server.started and info.pid != sleeper.pid and heartbeat(info.host, info.port)
            assert ServerInfo.read(s.data_dir) == info and servers_on(s) == [info.pid]
        finally:
            server.stop()
        assert sleeper.poll() is None and pid_alive(sleeper.pid)  # never signalled
        assert servers_on(s) == []

    def test_stop_does_not_signal_a_pid_that_is_no_longer_its_server(self, free: Settings,
                                                                     sleeper: subprocess.Popen[bytes]) -> None:
        """A server taken over from a killed worker (no child of ours) whose pid is reused."""
        server = ManagedServer(free)
        real = server.ensure()
        proc = server._proc
        try:
            server.info = ServerInfo(sleeper.pid, real.host, real.port, real.path, real.owner, real.started)
            server._proc = None
            server.kill_now()  # the worker's exit-now path
            server.stop()
            assert sleeper.poll() is None and heartbeat(real.host, real.port)
        finally:
            ManagedServer(free)._terminate_server(real, proc)
        assert servers_on(free) == []


@pytest.mark.slow
class TestUnrecordedServerAdopted:
    """Point 3: the record damaged or missing while the server runs."""

    @pytest.mark.parametrize("damage", ["deleted", "garbage", "empty"])
    def test_a_second_handle_adopts_the_same_server(self, free: Settings, damage: str) -> None:
        first = ManagedServer(free)
        info = first.ensure()
        try:
            record = free.data_dir / INFO_FILE
            if damage == "deleted":
                record.unlink()
            else:
                record.write_text("{not json" if damage == "garbage" else "")
            assert live_server(free) is not None and stores.reader_address(free) == (info.host, info.port)
            second = ManagedServer(free)
            adopted = second.ensure()
            assert (adopted.pid, adopted.port, adopted.started) == (info.pid, info.port, info.started)
            assert not second.started and adopted.owner == os.getpid()  # its starter (this process) stops it
            assert servers_on(free) == [info.pid]  # no second `chroma run` on the store
            assert ServerInfo.read(free.data_dir) == adopted  # recorded again, for the readers
            second.stop()
            assert heartbeat(info.host, info.port)
        finally:
            first.stop()
        assert servers_on(free) == [] and not record.exists()

    def test_an_orphan_found_in_the_process_table_is_taken_over(self, free: Settings) -> None:
        """The server's starter is gone (its parent is now init or a subreaper we cannot name):
        the adopter takes over the duty of stopping it."""
        script = ("import sys\nfrom memsync.config.settings import Settings\n"
                  "from memsync.chroma.server import ManagedServer\n"
                  f"ManagedServer(Settings(data_dir={str(free.data_dir)!r}, chroma_mode='managed')).ensure()\n")
        subprocess.run([sys.executable, "-c", script], check=True, timeout=120)  # exits without stopping it
        orphan = ServerInfo.read(free.data_dir)
        assert orphan is not None and servers_on(free) == [orphan.pid]
        (free.data_dir / INFO_FILE).unlink()
        adopter = ManagedServer(free)
        try:
            adopted = adopter.ensure()
            assert adopted.pid == orphan.pid and adopter.started and adopted.owner == os.getpid()
        finally:
            adopter.stop()
        assert servers_on(free) == []


@pytest.mark.slow
class TestRecordNotWritten:
    """Point 4 (the server's half): the record cannot be written (disk full)."""

    @staticmethod
    def _full(monkeypatch: pytest.MonkeyPatch) -> None:
        def no_space(self: ServerInfo, data_dir: Path) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(data_dir / INFO_FILE))

        monkeypatch.setattr(ServerInfo, "write", no_space)

    def test_the_started_server_is_stopped_and_the_error_is_one_line(self, free: Settings,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
        self._full(monkeypatch)
        server = ManagedServer(free)
        with pytest.raises(StoreUnavailable, match=f"^no space left on {free.data_dir} .*cannot record") as err:
            server.ensure()
        assert "\n" not in str(err.value) and not server.started
        assert servers_on(free) == [] and not (free.data_dir / INFO_FILE).exists()

    def test_verify_exits_1_with_one_line_and_no_server_left(self, free: Settings,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
        make_db(free.db, mixed_records(4))
        self._full(monkeypatch)
        for key, value in {"DB": free.db, "DATA_DIR": free.data_dir, "CHROMA_MODE": "managed"}.items():
            monkeypatch.setenv(f"MEMSYNC_{key}", str(value))
        for _ in range(2):  # each retry once left one more unrecorded server behind
            result = CliRunner().invoke(main, ["verify"])
            assert result.exit_code == 1, result.output
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith(f"memsync: no space left on {free.data_dir}"), lines
            assert servers_on(free) == []
