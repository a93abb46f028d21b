"""Excluded projects end to end: a real database, a real embedded Chroma, memsync's text
index and vector copy. Rows of an excluded project are neither synced nor searchable; a setting
that gains a project removes what was stored, one that loses it brings the rows back; claude-mem's
own CLAUDE_MEM_EXCLUDED_PROJECTS counts too, and a running worker notices it change."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memsync.chroma import collections as stores
from memsync.config.claude_mem import projects
from memsync.config.claude_mem.projects import ProjectExclusion, exclusion
from memsync.config.claude_mem.schema import Kind
from memsync.config.settings import Settings
from memsync.main import main
from memsync.search import Filters, Mode, Searcher, SearchError, SearchRequest
from memsync.search.projects import project_counts
from memsync.search.sql import SourceRows
from memsync.worker.checks.status import status
from memsync.worker.checks.verify import verify
from memsync.worker.pipeline.resync import resync
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.state import ACTIVE_COLLECTION, SyncState
from memsync.worker.rows.tail import SourceTail
from memsync.worker.stores.textsync import TextSync
from tests.conftest import make_db, mixed_records, obs, prompt, summary
from tests.upstream.written import written_db


def records() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, project in enumerate(("alpha", "secret-api", "beta")):
        out += [obs(i, project, narrative=f"the {project} deploy key rotation"), prompt(i, project),
                summary(i, project)]
    # Merged into an excluded project: excluded with it.
    out.append(obs(9, "old-name", narrative="old-name deploy key rotation", merged_into_project="secret-api"))
    return out


def settings_for(tmp_path: Path, **kw: Any) -> Settings:
    return Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="embedded",
                    **{"min_confidence": 0, **kw})  # what retrieval finds, not the lists' cutoff (tested on its own)


def stored_projects(settings: Settings) -> set[str]:
    with SyncState(settings.state_path) as state:
        name = state.get_meta(ACTIVE_COLLECTION)
    with stores.connect(settings) as handle:
        assert handle.client is not None and name
        got = handle.client.get_collection(name).get(include=["metadatas"])
    return {str(m.get("merged_into_project") or m.get("project")) for m in got["metadatas"]}


def found_projects(settings: Settings, mode: Mode) -> set[str]:
    engine = Searcher(settings)
    try:
        resp = engine.search(SearchRequest(
            query="deploy key rotation", filters=Filters(), window_days=0, mode=mode, limit=50))
        assert resp.mode is mode
        return {str(r.project) for r in resp.results}
    finally:
        engine.close()


def text_index_refreshes(settings: Settings) -> bool:
    """Whether a full refresh of memsync's text index succeeds (it logs and gives None when not)."""
    text = TextSync(settings)
    try:
        return text.step(force_full=True) is not None
    finally:
        text.close()


@pytest.mark.parametrize("own_indexes", [True, False], ids=["own-indexes", "fts5-and-chroma-only"])
def test_an_excluded_project_is_neither_synced_nor_searchable(tmp_path: Path, own_indexes: bool) -> None:
    base = settings_for(tmp_path, text_index=own_indexes, vector_copy=own_indexes)
    make_db(base.db, records())
    assert resync(base).added > 0
    assert stored_projects(base) == {"alpha", "secret-api", "beta"}

    excluded = base.model_copy(update={"excluded_projects": "~/src/secret-*"})
    result = resync(excluded)
    assert result.deleted > 0 and result.embedded == 0  # the setting gained a project: its documents go
    # status counts them under the excluded project, old-name's merged row with its own
    assert status(excluded).left_out == {"secret-api": 4}
    assert stored_projects(excluded) == {"alpha", "beta"}
    assert verify(excluded).clean
    if own_indexes:  # memsync's text index takes the excluded rows' cells too (it once failed on them)
        assert text_index_refreshes(excluded)
    for mode in (Mode.HYBRID, Mode.SEMANTIC, Mode.LEXICAL):
        assert found_projects(excluded, mode) == {"alpha", "beta"}, mode
    engine = Searcher(excluded)
    try:
        got, missing = engine.get(Kind.OBSERVATION, [1, 2, 4])  # 2: secret-api, 4: merged into it
        assert [r["id"] for r in got] == [1] and missing == [2, 4]
        assert engine.projects() == ["alpha", "beta"]  # old-name's one row is merged into secret-api
    finally:
        engine.close()

    again = resync(base)  # the setting lost it: the rows come back
    assert again.added > 0 and stored_projects(base) == {"alpha", "secret-api", "beta"}
    assert found_projects(base, Mode.LEXICAL) == {"alpha", "secret-api", "beta", "old-name"}


def test_claude_mems_own_setting_applies_and_a_running_worker_sees_it_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_for(tmp_path)
    make_db(settings.db, records())
    home = Path(str(tmp_path / "home"))
    (home / ".claude-mem").mkdir(parents=True)
    cm_settings = home / ".claude-mem" / "settings.json"
    cm_settings.write_text('{"CLAUDE_MEM_EXCLUDED_PROJECTS": "beta"}')
    resync(settings)
    assert stored_projects(settings) == {"alpha", "secret-api"}

    due = threading.Event()
    tail = SourceTail(settings.db, 1000, due, settings.excluded_projects)
    tail.open()
    try:
        with SyncState(settings.state_path) as state:
            name = state.get_meta(ACTIVE_COLLECTION)
            assert name and not tail.exclusion_changed() and not due.is_set()
            cm_settings.write_text('{"CLAUDE_MEM_EXCLUDED_PROJECTS": "beta,alpha"}')
            assert tail.exclusion_changed() and due.is_set()  # the full pass is asked for
            assert tail.reader is not None and tail.reader.exclusion is not None
            assert tail.reader.exclusion.patterns == ("beta", "alpha")
    finally:
        tail.close()
    monkeypatch.setenv("CLAUDE_MEM_EXCLUDED_PROJECTS", "")  # the environment wins over the file
    resync(settings)
    assert stored_projects(settings) == {"alpha", "secret-api", "beta"}


# What claude-mem 12.1.2-12.4.2 stored as prompts of its own project (upstream #2104): its observer
# agent's instructions and the tool events it was shown.
OBSERVER_PROMPT = ("You are a Claude-Mem, a specialized observer tool for creating searchable memory FOR FUTURE "
                   "SESSIONS. <observed_from_primary_session><what_happened>Bash</what_happened><parameters>"
                   "deploy key rotation</parameters></observed_from_primary_session>")


def _forget_cached_exclusions() -> None:
    ProjectExclusion.of.cache_clear()
    ProjectExclusion._matches.cache_clear()  # noqa: SLF001 - the rule itself changes under the test


def test_claude_mems_observer_sessions_are_neither_synced_nor_searchable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No setting names them. A data directory synced before memsync left them out loses their
    documents at its next pass, which embeds nothing."""
    settings = settings_for(tmp_path)
    make_db(settings.db, [*records(), prompt(20, "observer-sessions", prompt_text=OBSERVER_PROMPT),
                          obs(21, "observer-sessions", narrative="observer: deploy key rotation seen")])
    with monkeypatch.context() as before:  # as a memsync without the rule synced them: no excluded cell at all
        before.setattr(projects, "INTERNAL_PROJECTS", ())
        before.setattr(SourceReader, "_exclusion_columns", lambda self, kind: [])
        _forget_cached_exclusions()
        resync(settings)
        assert "observer-sessions" in stored_projects(settings)
    _forget_cached_exclusions()

    result = resync(settings)  # every row's hash changed (the cell): each derived again, none embedded again
    assert result.deleted > 0 and result.embedded == 0 and result.unchanged > 0
    assert stored_projects(settings) == {"alpha", "secret-api", "beta"}
    assert verify(settings).clean and text_index_refreshes(settings)
    for mode in (Mode.HYBRID, Mode.SEMANTIC, Mode.LEXICAL):
        assert found_projects(settings, mode) == {"alpha", "secret-api", "beta", "old-name"}, mode
    engine = Searcher(settings)
    try:
        assert engine.get(Kind.OBSERVATION, [5]) == ([], [5])  # 5: the observer's observation
        assert engine.get(Kind.PROMPT, [4]) == ([], [4])  # 4: the observer's prompt
        assert engine.projects() == ["alpha", "beta", "old-name", "secret-api"]
        for anchor in ("5", "P4"):  # nor a timeline's anchor
            with pytest.raises(SearchError, match="no (observation|prompt) with id"):
                engine.timeline(anchor)
    finally:
        engine.close()
    rows = SourceRows.open(settings)
    try:
        assert "observer-sessions" not in {c.project for c in project_counts(rows)}
        # its observation and its prompt are left out by the SQL; it has no summary to leave out
        assert [rows.where(kind, Filters(), None)[0] != "1" for kind in Kind] == [True, False, True]
    finally:
        rows.close()
    # memsync status says which projects it leaves out, and why their rows have no documents.
    opts = ["--db", str(settings.db), "--data-dir", str(settings.data_dir), "--chroma-mode", "embedded"]
    shown = CliRunner().invoke(main, ["status", *opts], catch_exceptions=False).stdout
    assert "left out, excluded: observer-sessions (claude-mem's own, 2 rows): no documents, no search" in shown
    got = json.loads(CliRunner().invoke(main, ["status", "--json", *opts], catch_exceptions=False).stdout)
    assert got["excluded_projects"]["left_out"] == {"observer-sessions": 2}


@pytest.mark.parametrize("patterns", ["", "secret-*"], ids=["no-patterns", "patterns"])
def test_a_project_name_that_is_not_utf8_stops_neither_sync_nor_search(tmp_path: Path, patterns: str) -> None:
    """SQLite cannot hand such text to a Python function: the names reach the exclusion as bytes,
    or not at all (plain SQL without patterns)."""
    db = make_db(tmp_path / "claude-mem.db", [obs(i, "alpha") for i in range(3)] + [prompt(0, "alpha")])
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("UPDATE observations SET project = CAST(x'616cff' AS TEXT) WHERE id = 2")
        conn.execute("UPDATE sdk_sessions SET project = CAST(x'626cff' AS TEXT)")
    ex = exclusion(patterns, {})
    with SourceReader(db, exclusion=ex) as reader:
        assert len(reader.read_batch(Kind.OBSERVATION, 0, 100)) == 3
        assert len(reader.row_hashes(Kind.OBSERVATION, 0, 100)) == 3
        assert len(reader.read_batch(Kind.PROMPT, 0, 100)) == 1
        assert reader.text_fingerprint(Kind.PROMPT, ("prompt_text",), 0, 10)[0] == 1
    rows = SourceRows(db, exclusion=ex)
    try:
        assert rows.count(Kind.OBSERVATION, Filters(), None) == 3
        assert rows.count(Kind.PROMPT, Filters(), None) == 1
    finally:
        rows.close()


def test_a_search_of_a_database_without_claude_mems_own_rows_carries_no_condition(tmp_path: Path) -> None:
    """Most databases hold none (claude-mem's cleanup deleted them): a search's SQL is then what it
    was before the rule, and FTS5 alone stays FTS5 alone (``search.app_fts``'s fast path)."""
    db = make_db(tmp_path / "claude-mem.db", records())
    rows = SourceRows(db)
    try:
        assert [rows.where(kind, Filters(), None)[0] for kind in Kind] == ["1", "1", "1"]
        assert rows.count(Kind.PROMPT, Filters(), None) == 3
    finally:
        rows.close()
    patterned = SourceRows(db, exclusion=exclusion("secret-*", {}))  # patterns: every statement applies them
    try:
        assert all(patterned.where(kind, Filters(), None)[0] != "1" for kind in Kind)
        assert patterned.count(Kind.PROMPT, Filters(), None) == 2
    finally:
        patterned.close()


def test_claude_mems_own_rows_by_merge_or_by_session_only(tmp_path: Path) -> None:
    """A row merged into claude-mem's own project is left out as the worker leaves it out, though no
    row of its kind has that project of its own; a prompt with no session stays (it has no project)."""
    db = make_db(tmp_path / "claude-mem.db", [*records(), prompt(20, "observer-sessions", prompt_text=OBSERVER_PROMPT),
                                              obs(30, "wt", merged_into_project="observer-sessions")])
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("UPDATE user_prompts SET session_db_id = NULL WHERE id = 1")
    rows = SourceRows(db)
    try:
        assert rows.passing(Kind.OBSERVATION, [1, 5], Filters(), None) == {1}  # 5: merged into it
        assert rows.passing(Kind.PROMPT, [1, 2, 4], Filters(), None) == {1, 2}  # 1: no session; 4: its own
    finally:
        rows.close()
    with SourceReader(db) as reader:
        assert [r.id for r in reader.read_batch(Kind.OBSERVATION, 0, 10) if not r.excluded] == [1, 2, 3, 4]


@pytest.mark.slow
def test_observer_rows_in_a_database_the_real_claude_mem_wrote(tmp_path: Path) -> None:
    """claude-mem 13.25.3's own worker writes the rows (its /api/import, which has no guard for its
    own project: the shape upstream #2104 reports), with its schema and indexes: the checks a
    search makes at open are index lookups there, and the rows are neither synced nor found."""
    settings = settings_for(tmp_path)
    written_db(settings.db, [*mixed_records(3), prompt(20, "observer-sessions", prompt_text=OBSERVER_PROMPT),
                             obs(21, "observer-sessions", narrative="observer: deploy key rotation seen")])
    with contextlib.closing(sqlite3.connect(f"file:{settings.db}?mode=ro", uri=True)) as conn:
        for table in ("sdk_sessions", "observations", "session_summaries"):
            for column in ("project", "merged_into_project") if table != "sdk_sessions" else ("project",):
                plan = " ".join(str(r[3]) for r in conn.execute(
                    f"EXPLAIN QUERY PLAN SELECT 1 FROM {table} t WHERE {ProjectExclusion.of(()).named('t.' + column)}"))
                assert "USING" in plan and "INDEX" in plan, (table, column, plan)
        assert conn.execute("SELECT count(*) FROM user_prompts p JOIN sdk_sessions s ON s.id = p.session_db_id "
                            "WHERE s.project = 'observer-sessions'").fetchone()[0] == 1
    assert resync(settings).added > 0
    assert stored_projects(settings) == {"alpha", "beta"}
    for mode in (Mode.HYBRID, Mode.SEMANTIC, Mode.LEXICAL):
        engine = Searcher(settings)
        try:
            resp = engine.search(SearchRequest(query="observer tool primary session deploy key rotation",
                                               filters=Filters(), window_days=0, mode=mode, limit=50))
            assert "observer-sessions" not in {str(r.project) for r in resp.results}, mode
        finally:
            engine.close()
    assert status(settings).left_out == {"observer-sessions": 2}
