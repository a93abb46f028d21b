"""A first sync's frontier: kept where searches see it while the pass runs, gone when it is through,
never written by a pass over rows that are all recorded; and what a search says meanwhile."""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memsync.chroma import collections as stores
from memsync.config.claude_mem.schema import TABLES, Kind
from memsync.config.formats.first_sync import INF_ID, mark_path, read_mark, write_mark
from memsync.config.settings import Settings
from memsync.search import Filters, Mode, Searcher, SearchRequest, Signal
from memsync.worker.pipeline.sink import ChromaSink
from memsync.worker.pipeline.sync import Destination, SyncOptions
from memsync.worker.pipeline.syncpass import EVERY_ROW, Scope, StoreCollection, SyncPass
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.state import SyncState
from tests.conftest import FakeEmbedder, make_db
from tests.worker.test_sync import RecordingSink

DAY_MS = 86_400_000
NOW_MS = int(time.time() * 1000)


def year_of_rows() -> list[dict[str, Any]]:
    """A year of memory, oldest first (ids grow with time): 48 observations, 24 prompts, 12
    summaries, all about caching."""
    out: list[dict[str, Any]] = []
    for i in range(48):
        ago = 360 - i * 7.5
        session = f"alpha-{i // 4}"
        out.append({"kind": "observation", "project": "alpha", "session": session, "type": "bugfix",
                    "title": f"Caching fix {i}", "narrative": f"The cache of module {i} went stale.",
                    "facts": [f"fact {i}"], "concepts": ["gotcha"], "files_read": [], "files_modified": [],
                    "prompt_number": 1, "created_at_epoch": int(NOW_MS - ago * DAY_MS)})
        if i % 2 == 0:
            out.append({"kind": "prompt", "project": "alpha", "session": session, "prompt_number": 1,
                        "prompt_text": f"why is the cache of module {i} stale", "created_at_epoch":
                        int(NOW_MS - ago * DAY_MS) + 1})
        if i % 4 == 0:
            out.append({"kind": "summary", "project": "alpha", "session": session, "request": f"caching {i}",
                        "learned": "caches go stale", "created_at_epoch": int(NOW_MS - ago * DAY_MS) + 2})
    return out


def sync_pass(settings: Settings, embedder: FakeEmbedder, scope: Scope = EVERY_ROW,
              stop_after_docs: int | None = None) -> tuple[str, bool]:
    """One full pass of memsync's own collection through ``SyncPass`` (what the worker, ``--once``
    and ``resync`` run); with ``stop_after_docs`` stopped once that many documents are written.
    Returns the collection's name and whether the pass was interrupted."""
    handle = stores.connect(settings)
    try:
        col = stores.open_collection(handle.client, settings, embedder.model_id, embedder.dimension)
        sink = RecordingSink(ChromaSink(col))
        options = SyncOptions.from_settings(settings)
        if stop_after_docs is not None:
            real = sink.upsert

            def upsert_then_stop(*a: Any, **kw: Any) -> None:
                real(*a, **kw)
                if len(sink.upserted) >= stop_after_docs:
                    options.stop.set()

            sink.upsert = upsert_then_stop  # type: ignore[method-assign]
        with SourceReader(settings.db) as reader, SyncState(settings.state_path) as state:
            state.set_meta("active_collection", col.name)
            result = SyncPass(settings, reader, state, StoreCollection(None, due=False), options).run(
                Destination(col.name, sink), embedder, lambda: None, scope)
        return col.name, result.interrupted
    finally:
        handle.close()


def not_compared(db: Path, cursor: dict[Kind, int]) -> int:
    """Rows at or below the cursor (a kind absent: none)."""
    with sqlite3.connect(db) as conn:
        return sum(int(conn.execute(f"SELECT COUNT(*) FROM {TABLES[k]} WHERE id <= ?", (cursor[k],)).fetchone()[0])
                   for k in cursor)


def search(settings: Settings, **filters: Any) -> Any:
    engine = Searcher(settings, embedder=FakeEmbedder())
    try:
        return engine.search(SearchRequest(query="cache stale", window_days=0 if not filters else None,
                                           filters=Filters(**filters)))
    finally:
        engine.close()


@pytest.fixture
def year(settings: Settings) -> Settings:
    make_db(settings.db, year_of_rows())
    return settings


def test_a_search_during_a_first_sync_says_what_is_missing_until_the_pass_is_through(
    year: Settings, fake_embedder: FakeEmbedder
) -> None:
    name, interrupted = sync_pass(year, fake_embedder, stop_after_docs=40)
    assert interrupted
    cursor = read_mark(year.data_dir, name)
    assert cursor is not None and all(at < INF_ID for at in cursor.values())  # every kind's newest went first
    missing = not_compared(year.db, cursor)
    assert 0 < missing < 84

    everything = search(year)
    assert everything.mode is Mode.HYBRID and everything.coverage is not None
    assert everything.coverage.missing_rows == missing and everything.coverage.scope_rows == 84
    assert everything.to_json()["coverage"]["missing_share"] == round(missing / 84, 4)
    assert "first sync in progress" in (everything.reason or "")
    # The semantic side found only rows the pass had synced: above its kind's cursor.
    semantic = [r for r in everything.results if r.signals in (Signal.SEMANTIC, Signal.BOTH)]
    assert semantic and all(r.id > cursor[r.kind] for r in semantic)
    start = datetime.strptime(everything.coverage.from_date, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)

    # A window that starts there is covered: hybrid, and nothing said; one a day earlier is not.
    covered = search(year, date_from=start)
    assert covered.mode is Mode.HYBRID and covered.coverage is None and covered.reason is None
    earlier = search(year, date_from=datetime.fromtimestamp(start.timestamp() - 86_400, UTC))
    assert earlier.coverage is not None and earlier.coverage.missing_rows >= 1

    # The next pass takes it up; through, the mark is gone and nothing is missing.
    assert sync_pass(year, fake_embedder) == (name, False)
    assert read_mark(year.data_dir, name) is None
    after = search(year)
    assert after.coverage is None and after.to_json()["coverage"] is None and after.reason is None


def test_a_pass_over_recorded_rows_writes_no_mark_and_clears_a_stale_one(
    year: Settings, fake_embedder: FakeEmbedder
) -> None:
    name, _ = sync_pass(year, fake_embedder)
    assert not mark_path(year.data_dir, name).exists()
    write_mark(year.data_dir, name, {Kind.OBSERVATION: 10}, 0)  # left by a pass another process did not finish
    assert search(year).coverage is not None
    sync_pass(year, fake_embedder)
    assert read_mark(year.data_dir, name) is None and search(year).coverage is None


def test_a_dry_run_or_one_project_writes_no_mark(year: Settings, fake_embedder: FakeEmbedder) -> None:
    name, _ = sync_pass(year, fake_embedder, Scope(project="alpha"))
    assert read_mark(year.data_dir, name) is None
    with sqlite3.connect(year.db) as conn:
        conn.execute("UPDATE observations SET narrative = 'edited' WHERE id = 3")
    sync_pass(year, fake_embedder, Scope(dry_run=True))
    assert read_mark(year.data_dir, name) is None


def test_an_unreadable_mark_overstates_never_hides(tmp_path: Path) -> None:
    path = mark_path(tmp_path, "c")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert read_mark(tmp_path, "c") == dict.fromkeys(Kind, INF_ID)
    path.unlink()
    assert read_mark(tmp_path, "c") is None
