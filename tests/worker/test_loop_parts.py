"""Parts of the worker loop without a worker: change detection (worker.rows.tail) and health (worker.loop.health)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
from pathlib import Path
from typing import Any

from memsync.config.errors import StoreUnavailable
from memsync.config.formats.worker_status import read_worker_status
from memsync.config.settings import Settings
from memsync.worker.loop.health import Health
from memsync.worker.rows.state import SyncState
from memsync.worker.rows.tail import SourceTail
from memsync.worker.seed.importer import import_records
from tests.conftest import make_db, mixed_records


class Events:
    """A logger that keeps the event names."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def info(self, event: str, **fields: Any) -> None:
        self.names.append(event)

    warning = info


def test_tail_sees_new_rows_ids_that_went_down_and_a_replaced_file(tmp_path: Path) -> None:
    db = make_db(tmp_path / "claude-mem.db", [])
    due = threading.Event()
    tail = SourceTail(db, 5000, due)
    tail.open()
    try:
        with SyncState(tmp_path / "state.db") as state:
            assert not tail.replaced()
            assert not tail.changed(state, "c", pending=False) and not tail.settled  # a first look
            assert not tail.changed(state, "c", pending=False) and tail.settled
            import_records(db, mixed_records(2))
            assert tail.changed(state, "c", pending=False) and not tail.settled
            assert not due.is_set()
            conn = sqlite3.connect(db)
            conn.execute("DELETE FROM observations WHERE id = (SELECT MAX(id) FROM observations)")
            conn.commit()
            conn.close()
            assert tail.changed(state, "c", pending=False) and due.is_set()  # ids went down: reconcile
            shutil.copy(db, tmp_path / "restored.db")
            os.replace(tmp_path / "restored.db", db)
            assert tail.replaced()
            assert not tail.replaced()  # the new file is the one followed now
    finally:
        tail.close()
    assert tail.reader is None


def test_health_degrades_and_recovers_once_and_writes_on_news_or_force(settings: Settings) -> None:
    settings.data_dir.mkdir(parents=True)
    log = Events()
    health = Health(settings, log)
    health.status.chroma_reachable = True
    for _ in range(3):
        health.degraded(StoreUnavailable("Chroma is away"))
    assert log.names == ["sync_degraded"]
    assert health.status.consecutive_errors == 3 and not health.status.chroma_reachable
    assert health.backoff.delay > settings.poll_interval_s
    health.publish(force=True)
    assert (read_worker_status(settings.data_dir) or {})["last_error"] == "Chroma is away"
    health.recovered()
    assert log.names == ["sync_degraded", "sync_recovered"] and not health.status.degraded
    assert health.status.last_error is None and health.status.next_retry_ms is None  # history once recovered
    health.publish()  # no pass since the last write and the heartbeat is fresh: not written
    assert (read_worker_status(settings.data_dir) or {})["degraded"] is True
    health.status.passes += 1
    health.publish()
    assert (read_worker_status(settings.data_dir) or {})["degraded"] is False
    health.stopping()
    health.stopped()
    assert (read_worker_status(settings.data_dir) or {})["stopping"] is True
