"""worker.pipeline.progress: what a first sync (newest first) has made searchable and when the rest will be."""

from __future__ import annotations

import time
from pathlib import Path

from memsync.commands.sync import first_sync_text
from memsync.config.claude_mem.schema import Kind
from memsync.config.formats.first_sync import INF_ID, every_kind, write_mark
from memsync.config.formats.worker_status import PHASE_FIRST_PASS
from memsync.config.settings import Settings
from memsync.worker.loop.health import Health
from memsync.worker.pipeline.progress import FirstSyncProgress
from memsync.worker.process import logs
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.state import now_ms
from tests.conftest import BASE_MS, make_db, obs, prompt, summary

DAY_MS = 86_400_000


def test_a_pass_halfway_through_the_observations(tmp_path: Path) -> None:
    recent = now_ms() - 2 * DAY_MS  # two rows inside a 30-day window, the rest months old
    db = make_db(tmp_path / "claude-mem.db", [obs(i) for i in range(10)] + [
        obs(10, created_at_epoch=recent), obs(11, created_at_epoch=recent + 1000), prompt(1), summary(1)])
    # Observations 7..12 and the prompt done; observations 1..6 and the summary left.
    cursor = {Kind.OBSERVATION: 6, Kind.SUMMARY: INF_ID}
    progress = FirstSyncProgress(cursor, window_days=30, started=time.monotonic() - 10)
    progress.passed(rows=7, embedded=21)
    with SourceReader(db) as reader:
        got = progress.snapshot(reader)
    assert got["rows_left"] == 7 and got["documents_left"] == 21  # 3 documents a row so far
    assert got["window_rows_left"] == 0 and got["eta_window_s"] == 0.0  # the window is done
    assert 9 < got["eta_all_s"] < 11  # 7 rows at 0.7 rows/s
    assert 2 < got["docs_per_s"] < 2.2
    # Every row newer than the newest row still to compare is synced: that is observation 6
    # (BASE_MS + 5000); the summary left is older (BASE_MS + 1500).
    assert got["searchable_from_ms"] == BASE_MS + 5 * 1000

    with SourceReader(db) as reader:
        assert FirstSyncProgress(every_kind(), 30).snapshot(reader)["window_rows_left"] == 2
        done = FirstSyncProgress({}, 30).snapshot(reader)
    assert done["rows_left"] == 0 and done["searchable_from_ms"] is None and done["eta_all_s"] == 0.0


def test_the_status_line_says_it_in_words() -> None:
    text = first_sync_text({"searchable_from_ms": 1_780_000_000_000, "rows_left": 1200, "documents_left": 3900,
                            "window_days": 90, "docs_per_s": 61.5, "eta_window_s": 75.0, "eta_all_s": 4000.0})
    assert text == ("searchable by meaning back to 2026-05-28 20:26:40Z; 1200 rows (~3900 documents) left at "
                    "61.5 documents/s; the last 90 days done in ~75 s, all in ~67 min")
    assert "nothing searchable by meaning yet" in first_sync_text({"rows_left": 5, "eta_all_s": None})
    assert first_sync_text({"rows_left": 5, "eta_all_s": None}).endswith("all in unknown")


def test_worker_json_tells_a_first_sync_only_while_its_cursor_is_kept(tmp_path: Path) -> None:
    """A worker restarted on synced records runs a first pass too; it embeds nothing it is not told
    of, so worker.json gives no first-sync figures unless the pass keeps a cursor (worker.pipeline.frontier)."""
    db = make_db(tmp_path / "claude-mem.db", [obs(i) for i in range(4)])
    settings = Settings(db=db, data_dir=tmp_path / "data")
    health = Health(settings, logs.get_logger())
    health.pass_started(full=True)
    assert health.status.phase == PHASE_FIRST_PASS
    with SourceReader(db) as reader:
        health.first_sync = (FirstSyncProgress(every_kind(), 90), lambda: reader, "memsync-g1")
        health.publish(force=True)
        assert health.status.first_sync is None  # no cursor kept: a reconcile of synced records
        write_mark(settings.data_dir, "memsync-g1", every_kind(), now_ms())
        health.publish(force=True)
        assert health.status.first_sync is not None and health.status.first_sync["rows_left"] == 4
