"""claude-mem rewrites ``project`` in place (its one-time cwd remap, ``ProcessManager.executeCwdRemap``,
with ``remap-outbox.emitRemapProject``'s SQL; upstream main's worktree work keeps it): memsync's next
full pass relabels every document of the moved rows (prompts too, whose project is their session's)
without embedding anything, in Chroma, the vector copy and the text index, so a search filtered by
the new project finds them and one by the old finds nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from memsync.chroma import collections as stores
from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.settings import Settings
from memsync.search import Filters, Mode, Searcher, SearchRequest
from memsync.search.models import Scope, Window
from memsync.search.textindex import TextIndex
from memsync.search.vectorcopy import VectorCopy
from memsync.worker.checks.verify import verify
from memsync.worker.pipeline.resync import resync
from memsync.worker.rows.state import ACTIVE_COLLECTION, SyncState
from tests.conftest import FakeEmbedder, make_db, mixed_records

ALL = Window(0, None, None, "all_time")
OLD, NEW = "beta", "beta-worktree"


def remap_project(db: Path, old: str, new: str) -> int:
    """Upstream's cwd remap on a database with the sync lane: per session, the session row, then its
    observations and summaries with ``sync_rev`` bumped and ``synced_at`` re-nulled (the
    ``sync_outbox`` op it also queues is not part of what memsync reads)."""
    conn = sqlite3.connect(db)
    with conn:
        sessions = conn.execute("SELECT id, memory_session_id FROM sdk_sessions WHERE project = ?", (old,)).fetchall()
        for session_id, memory_session_id in sessions:
            conn.execute("UPDATE sdk_sessions      SET project = ? WHERE id = ?", (new, session_id))
            rev = conn.execute("SELECT 1 + COALESCE(MAX(sync_rev), 0) FROM (SELECT sync_rev FROM observations "
                               "WHERE memory_session_id = ? UNION ALL SELECT sync_rev FROM session_summaries "
                               "WHERE memory_session_id = ?)", (memory_session_id, memory_session_id)).fetchone()[0]
            for table in ("observations", "session_summaries"):
                conn.execute(f"UPDATE {table} SET project = ?, sync_rev = ?, synced_at = CASE WHEN origin_device_id "
                             "IS NULL THEN NULL ELSE synced_at END WHERE memory_session_id = ?",
                             (new, rev, memory_session_id))
    conn.close()
    return len(sessions)


def _projects(client: Any, settings: Settings, embedder: FakeEmbedder, project: str) -> set[str]:
    col = stores.open_collection(client, settings, embedder.model_id, embedder.dimension)
    return set(col.get(where={"project": project}, include=[])["ids"])


def test_a_project_rewritten_in_place_reaches_every_index(tmp_path: Path, fake_embedder: FakeEmbedder) -> None:
    settings = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="embedded",
                        min_confidence=0, text_index=True, vector_copy=True)
    make_db(settings.db, mixed_records(12))
    resync(settings, embedder=fake_embedder)
    with stores.connect(settings) as handle:
        moved = _projects(handle.client, settings, fake_embedder, OLD)
    assert len(moved) == 42 and any(i.startswith("prompt_") for i in moved)  # 6 rows of each kind

    assert remap_project(settings.db, OLD, NEW) == 3  # beta-s0, -s1, -s2
    embedded = fake_embedder.embedded
    result = resync(settings, embedder=fake_embedder)  # the next full pass (the worker's reconcile)
    assert (result.added, result.updated, result.deleted) == (0, 42, 0)
    assert fake_embedder.embedded == embedded  # a relabel: nothing embedded again
    report = verify(settings)
    assert report.clean and report.copy_drift == 0, report.examples
    with stores.connect(settings) as handle:
        assert _projects(handle.client, settings, fake_embedder, NEW) == moved
        assert _projects(handle.client, settings, fake_embedder, OLD) == set()

    with SyncState(settings.state_path) as state:
        collection = state.get_meta(ACTIVE_COLLECTION)
    assert collection is not None
    copy = VectorCopy.open(settings, collection, fake_embedder.model_id, fake_embedder.dimension)
    assert copy is not None
    assert len(copy.candidates(KINDS, Filters(project=NEW), ALL)) == 42
    assert len(copy.candidates(KINDS, Filters(project=OLD), ALL)) == 0

    index, damaged = TextIndex.open_checked(settings)
    assert index is not None and damaged is None
    words = {Kind.OBSERVATION: "narrative", Kind.SUMMARY: "request", Kind.PROMPT: "problem"}
    for kind, word in words.items():  # each kind's rows 2, 4, ... 12 were beta's
        assert {i for i, _ in index.search(kind, word, Scope(Filters(project=NEW), ALL), 50)} == {2, 4, 6, 8, 10, 12}
        assert index.search(kind, word, Scope(Filters(project=OLD), ALL), 50) == []

    engine = Searcher(settings)
    try:
        found = engine.search(SearchRequest(
            query="problem", window_days=0, mode=Mode.LEXICAL, kinds=[Kind.PROMPT], filters=Filters(project=NEW),
            limit=20))
        assert sorted(r.id for r in found.results) == [2, 4, 6, 8, 10, 12]
        assert engine.search(SearchRequest(
            query="problem", window_days=0, mode=Mode.LEXICAL, kinds=[Kind.PROMPT],
            filters=Filters(project=OLD))).results == []
    finally:
        engine.close()


def test_a_merge_reaches_the_text_index_too(tmp_path: Path, fake_embedder: FakeEmbedder) -> None:
    """merged_into_project is a filter cell of the text index as well: a merge written in place
    (WorktreeAdoption's UPDATE) is found by the next full pass's fingerprint."""
    settings = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="embedded",
                        min_confidence=0, text_index=True)
    make_db(settings.db, mixed_records(12))
    resync(settings, embedder=fake_embedder)
    conn = sqlite3.connect(settings.db)
    with conn:
        conn.execute("UPDATE observations SET merged_into_project = ? WHERE project = ? "
                     "AND merged_into_project IS NULL", ("alpha", OLD))
    conn.close()
    resync(settings, embedder=fake_embedder)
    index, _ = TextIndex.open_checked(settings)
    assert index is not None
    assert {i for i, _ in index.search(Kind.OBSERVATION, "narrative", Scope(Filters(project="alpha"), ALL), 50)} == set(
        range(1, 13))
