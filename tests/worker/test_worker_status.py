"""``worker.json`` (config.formats.worker_status) and the worker lock: written by one process, read by others."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memsync.config.errors import ConfigError
from memsync.config.formats.worker_status import STALE_MS, STATUS_FILE, WorkerStatus, read_worker_status, worker_state
from memsync.config.settings import Settings
from memsync.worker.loop.lock import WorkerLock
from memsync.worker.rows.state import now_ms


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_round_trip_and_a_live_worker_is_up(tmp_path: Path) -> None:
    now = now_ms()
    status = WorkerStatus(os.getpid(), now - 1000, "managed", "/x/claude-mem.db", heartbeat_ms=now, passes=3,
                          totals={"added": 7})
    status.write(tmp_path)
    raw = read_worker_status(tmp_path)
    assert raw == vars(status)
    assert not (tmp_path / (STATUS_FILE + ".tmp")).exists()
    state = worker_state(tmp_path, now)
    assert state["up"] and state["reason"] is None and state["passes"] == 3 and state["totals"] == {"added": 7}


def test_a_dead_pid_a_stale_heartbeat_or_a_stop_read_as_not_running(tmp_path: Path) -> None:
    now = now_ms()
    WorkerStatus(dead_pid(), now, "managed", "db", heartbeat_ms=now).write(tmp_path)
    state = worker_state(tmp_path, now)
    assert state["up"] is False and state["reason"] == "stopped" and state["heartbeat_ms"] == now
    WorkerStatus(os.getpid(), now, "managed", "db", heartbeat_ms=now - STALE_MS).write(tmp_path)
    assert worker_state(tmp_path, now)["reason"].startswith("heartbeat is stale: none for ")
    WorkerStatus(os.getpid(), now, "managed", "db", heartbeat_ms=now, stopping=True).write(tmp_path)
    assert worker_state(tmp_path, now)["up"] is False


def test_no_file_or_a_torn_one_reads_as_none(tmp_path: Path) -> None:
    assert read_worker_status(tmp_path) is None
    assert worker_state(tmp_path, now_ms()) == {"up": False, "reason": "no worker has run for this data directory"}
    (tmp_path / STATUS_FILE).write_text('{"pid": 1')
    assert read_worker_status(tmp_path) is None


def test_a_second_worker_lock_fails_naming_the_first_pid(tmp_path: Path) -> None:
    first, second = WorkerLock(tmp_path / "data"), WorkerLock(tmp_path / "data")
    first.acquire()
    try:
        WorkerStatus(4242, 0, "managed", "db").write(tmp_path / "data")
        with pytest.raises(ConfigError, match=f"pid {os.getpid()}"):  # the lock's holder, over worker.json
            second.acquire()
    finally:
        first.release()
    second.acquire()  # free once released
    second.release()
    second.release()  # releasing twice is harmless


def test_the_heartbeat_goes_on_while_the_loop_waits_within_the_bound_only(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the loop waits on a call (``Health.busy``) the heartbeat thread refreshes worker.json,
    saying what it waits on; past the call's bound it stops, so a hung call reads as stale."""
    from memsync.worker.loop import health as health_module
    from tests.worker.test_loop_parts import Events

    monkeypatch.setattr(health_module, "HEARTBEAT_EVERY_S", 0.05)
    settings.data_dir.mkdir(parents=True)
    health = health_module.Health(settings, Events())
    health.started()
    try:
        first = (read_worker_status(settings.data_dir) or {})["heartbeat_ms"]

        def beat() -> dict[str, Any]:
            return read_worker_status(settings.data_dir) or {}

        with health.busy("the embeddings endpoint http://x/v1", up_to_s=0.6):
            wait_until(lambda: beat().get("heartbeat_ms", 0) >= first + 100)
            assert beat()["waiting_on"]["what"] == "the embeddings endpoint http://x/v1"
            assert beat()["waiting_on"]["up_to_s"] == 0.6
            wait_until(lambda: now_ms() - beat()["waiting_on"]["since_ms"] > 1500)  # well past the bound
            stopped_at = beat()["heartbeat_ms"]
            assert now_ms() - stopped_at >= 500, "the heartbeat went on past the call's bound"
        health.publish(force=True)
        assert beat()["waiting_on"] is None
    finally:
        health.stopping()


def wait_until(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
