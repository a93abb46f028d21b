"""worker.loop.lock: the second worker names the first one's real pid (it once said ``pid ?``)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memsync.config.errors import ConfigError
from memsync.config.formats.worker_status import WorkerStatus
from memsync.worker.loop.lock import LOCK_FILE, WorkerLock, holder_db, holder_pid

HOLD = """
import sys
from pathlib import Path
from memsync.worker.loop.lock import WorkerLock
lock = WorkerLock(Path(sys.argv[1]))
lock.acquire()
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
lock.release()
"""


@pytest.mark.slow
def test_a_second_worker_names_the_pid_of_the_process_holding_the_lock(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with subprocess.Popen([sys.executable, "-c", HOLD, str(data)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as holder:
        assert holder.stdin is not None and holder.stdout is not None
        try:
            assert holder.stdout.readline() == "held\n"
            WorkerStatus(4242, 0, "managed", "db").write(data)  # a stale worker.json does not win
            with pytest.raises(ConfigError) as info:
                WorkerLock(data).acquire()
            assert str(info.value) == f"another worker (pid {holder.pid}) already runs for {data}"
        finally:
            holder.stdin.close()
            assert holder.wait(30) == 0
    assert (data / LOCK_FILE).read_text() == ""  # released: no pid left to mislead the next reader
    mine = WorkerLock(data)
    mine.acquire()  # free again
    mine.release()


def test_an_unknown_pid_is_left_out_of_the_message(tmp_path: Path) -> None:
    """A holder that wrote no pid (yet), and no worker.json: a sentence without "pid ?"."""
    tmp_path.joinpath(LOCK_FILE).touch()
    with open(tmp_path / LOCK_FILE, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        assert holder_pid(tmp_path) is None
        with pytest.raises(ConfigError) as info:
            WorkerLock(tmp_path).acquire()
    assert str(info.value) == f"another worker already runs for {tmp_path}" and "?" not in str(info.value)


def test_without_a_pid_in_the_lock_worker_json_names_it(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE).write_text("not a pid\n")
    WorkerStatus(4242, 0, "managed", "db").write(tmp_path)
    assert holder_pid(tmp_path) == 4242


def test_the_message_names_the_database_the_holder_follows(tmp_path: Path) -> None:
    """The holder writes its database under its pid; a second worker's one line names both."""
    data, shop = tmp_path / "data", tmp_path / "shop.db"
    first = WorkerLock(data, shop)
    first.acquire()
    try:
        with pytest.raises(ConfigError) as info:
            WorkerLock(data, tmp_path / "claude-mem.db").acquire()
        expected = f"another worker (pid {os.getpid()}, following {shop.resolve()}) already runs for {data}"
        assert str(info.value) == expected
    finally:
        first.release()


def test_an_older_lock_without_a_database_takes_it_from_the_holders_worker_json(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE).write_text("4242\n")
    WorkerStatus(4242, 0, "managed", "/x/shop.db").write(tmp_path)
    assert holder_db(tmp_path, 4242) == "/x/shop.db"
    assert holder_db(tmp_path, 4343) is None  # another process's worker.json says nothing of the holder
