"""The agent's database going bad under a running worker: damaged in place, replaced by
bytes that are not SQLite or by another program's SQLite file. Reads fail as SourceUnavailable
(the worker's degraded state, with backoff), never as a bare sqlite3 error; a file that was never a
claude-mem database stays a setup error. Also what the worker says while it starts (worker.json's
phase) and the file events it takes as hints."""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest
from watchdog.events import FileClosedNoWriteEvent, FileModifiedEvent, FileOpenedEvent

from memsync.config.claude_mem.schema import SchemaError
from memsync.config.errors import SourceUnavailable
from memsync.config.formats.worker_status import read_worker_status
from memsync.config.settings import Settings
from memsync.worker.loop.health import Health
from memsync.worker.loop.watch import _Hint
from memsync.worker.pipeline.sync import SyncResult
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.tail import SourceTail
from tests.conftest import make_db, mixed_records
from tests.worker.test_loop_parts import Events


def foreign_db(path: Path) -> Path:
    """Another program's SQLite file: none of claude-mem's tables."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.commit()
    conn.close()
    return path


def replace_with(db: Path, source: Path) -> None:
    """Swap the file as a restore or another program would: a new file renamed over it."""
    tmp = db.with_suffix(".swap")
    shutil.copy(source, tmp)
    os.replace(tmp, db)


@pytest.fixture
def good(tmp_path: Path) -> Path:
    """A good copy of the database the tests break (tests write their own files, never the agent's)."""
    return make_db(tmp_path / "good.db", mixed_records(3))


class TestReader:
    def test_a_file_truncated_under_an_open_reader_is_unavailable_not_a_sqlite_error(
            self, tmp_path: Path, good: Path) -> None:
        db = tmp_path / "claude-mem.db"
        shutil.copy(good, db)
        with SourceReader(db) as reader:
            assert sum(reader.max_ids().values()) > 0
            os.truncate(db, 0)
            with pytest.raises(SourceUnavailable, match="cannot read source database"):
                reader.max_ids()

    def test_garbage_bytes_are_unavailable(self, tmp_path: Path) -> None:
        db = tmp_path / "claude-mem.db"
        db.write_bytes(b"\x00not sqlite at all\xff" * 512)
        with pytest.raises(SourceUnavailable, match="file is not a database"):
            SourceReader(db)


class TestTail:
    def test_foreign_file_at_start_is_a_setup_error(self, tmp_path: Path) -> None:
        tail = SourceTail(foreign_db(tmp_path / "claude-mem.db"), 5000, threading.Event())
        with pytest.raises(SchemaError, match="not a claude-mem database"):
            tail.open()

    @pytest.mark.parametrize("breakage", ["truncated", "garbage", "foreign"])
    def test_a_file_that_goes_bad_while_followed_is_unavailable_then_comes_back_with_a_reconcile(
            self, tmp_path: Path, good: Path, breakage: str) -> None:
        db = tmp_path / "claude-mem.db"
        shutil.copy(good, db)
        due = threading.Event()
        tail = SourceTail(db, 5000, due)
        try:
            tail.open()
            if breakage == "truncated":
                os.truncate(db, 0)
            elif breakage == "garbage":
                (tmp_path / "garbage").write_bytes(os.urandom(8192))
                replace_with(db, tmp_path / "garbage")
            else:
                replace_with(db, foreign_db(tmp_path / "foreign.db"))
            with pytest.raises(SourceUnavailable):  # what the worker's step sees, whichever call finds it
                tail.replaced()
                assert tail.reader is not None
                tail.reader.max_ids()
            tail.lost()  # the degraded step
            with pytest.raises(SourceUnavailable) as err:  # each retry: unavailable, never a setup error
                tail.open()
            assert tail.reader is None and not due.is_set()
            if breakage != "garbage":
                assert "changed under the worker: not a claude-mem database" in str(err.value)
            replace_with(db, good)
            assert sum(tail.open().max_ids().values()) > 0
            assert due.is_set()  # the file that came back may be another one: compare everything
        finally:
            tail.close()

    def test_a_replacement_right_after_opening_is_still_seen(self, tmp_path: Path, good: Path) -> None:
        """The file's identity is taken when the reader opens, not at the first change check: a
        swap in between was missed, and the old connection read the deleted file for ever."""
        db = tmp_path / "claude-mem.db"
        shutil.copy(good, db)
        tail = SourceTail(db, 5000, threading.Event())
        try:
            tail.open()
            replace_with(db, foreign_db(tmp_path / "foreign.db"))
            with pytest.raises(SourceUnavailable, match="changed under the worker"):
                tail.replaced()
        finally:
            tail.close()


class TestHints:
    def test_reads_of_the_database_do_not_wake_the_loop_writes_do(self, tmp_path: Path) -> None:
        """The worker's own failed opens made open/close events: taken as hints, they turned the
        backoff into ~18 retries a second."""
        wake = threading.Event()
        hint = _Hint({"claude-mem.db"}, wake)
        path = str(tmp_path / "claude-mem.db")
        hint.on_any_event(FileOpenedEvent(path))
        hint.on_any_event(FileClosedNoWriteEvent(path))
        assert not wake.is_set()
        hint.on_any_event(FileModifiedEvent(path))
        assert wake.is_set()


class TestPhase:
    def test_worker_json_from_the_lock_on_first_pass_with_progress_then_following(self, settings: Settings) -> None:
        settings.data_dir.mkdir(parents=True)
        health = Health(settings, Events())
        health.started()
        assert (read_worker_status(settings.data_dir) or {})["phase"] == "starting"
        health.pass_started(full=True)
        assert (read_worker_status(settings.data_dir) or {})["phase"] == "first pass"
        health.pass_progress(500, 10)
        health.pass_progress(200, 0)
        assert health.status.pass_rows_done == 700
        health.record_pass(SyncResult(collection="c", rows=700, interrupted=True), full=True)
        assert health.status.phase == "first pass"  # stopped midway: not through yet
        health.pass_started(full=True)
        health.record_pass(SyncResult(collection="c", rows=900), full=True)
        assert health.status.phase == "following"
        health.pass_started(full=True)  # later reconciles are no first pass
        assert health.status.phase == "following"

    def test_degraded_publishes_the_growing_retry_delay(self, settings: Settings) -> None:
        health = Health(settings, Events())
        delays = []
        for _ in range(4):
            health.degraded(SourceUnavailable("file is not a database"))
            delays.append(health.status.retry_in_s)
        assert delays == sorted(delays) and delays[-1] > delays[0]
        health.recovered()
        assert health.status.retry_in_s == 0.0
