"""The search library against real SQLite files and a real (embedded) Chroma, with the shipped model.

Each upstream defect of the schema notes (items 5-9) has a test built to fail on the naive design.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from memsync.config.claude_mem.schema import Era, Kind
from memsync.config.settings import Settings
from memsync.search import Filters, Mode, Order, Searcher, SearchError, SearchRequest, Signal
from memsync.worker.pipeline.resync import resync
from tests.conftest import free_port, make_db

DAY_MS = 86_400_000
NOW_MS = int(time.time() * 1000)


def o(text: str, days_ago: float, project: str = "alpha", **extra: Any) -> dict[str, Any]:
    rec = {"kind": "observation", "project": project, "session": f"{project}-{int(days_ago)}", "type": "discovery",
           "title": text[:40], "narrative": text, "facts": [], "concepts": ["how-it-works"],
           "files_read": ["src/app.py"], "files_modified": [], "prompt_number": 1,
           "created_at_epoch": int(NOW_MS - days_ago * DAY_MS)}
    rec.update(extra)
    return rec


def p(text: str, days_ago: float, project: str = "alpha", number: int = 1) -> dict[str, Any]:
    return {"kind": "prompt", "project": project, "session": f"{project}-{int(days_ago)}", "prompt_number": number,
            "prompt_text": text, "created_at_epoch": int(NOW_MS - days_ago * DAY_MS)}


def s(text: str, days_ago: float, project: str = "alpha") -> dict[str, Any]:
    return {"kind": "summary", "project": project, "session": f"{project}-{int(days_ago)}", "request": text,
            "learned": text, "created_at_epoch": int(NOW_MS - days_ago * DAY_MS)}


OLD_NEAR = [o(f"Database connection pool timeout number {i} in the billing service", 200 + i) for i in range(130)]
RECENT_FAR = o("Requests to Postgres stalled because every pooled connection was busy", 3, type="bugfix")


def corpus() -> list[dict[str, Any]]:
    return [
        *OLD_NEAR,
        RECENT_FAR,
        o("Deep dive into the layout engine and CSS grid", 10, type="feature", concepts=["pattern"],
          files_modified=["web/grid.css"]),
        o("Unrelated note about cooking pasta", 5, project="beta"),
        o("Merged project observation about caching", 4, project="old-name", merged_into_project="alpha"),
        p("how do I configure the retry budget for flaky uploads", 2),
        s("Session about dark mode colors in the dashboard", 1),
    ]


def build(tmp: Path, records: list[dict[str, Any]], **kw: Any) -> Settings:
    # What retrieval finds, not the lists' cutoff (tested on its own).
    settings = Settings(db=tmp / "claude-mem.db", data_dir=tmp / "data",
                        **{"chroma_mode": "embedded", "min_confidence": 0, **kw})
    make_db(settings.db, records)
    resync(settings)
    return settings


@pytest.fixture(scope="module", params=[True, False], ids=["own-indexes", "fts5-and-chroma-only"])
def searcher(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    # Top-N of 5 (25 when over-fetched) with 130 older near-matches: the corpus that breaks
    # "filter after the cut". Every test runs with memsync's text index and vector copy, and with
    # FTS5 and Chroma alone (a search server without the worker's data directory).
    settings = build(tmp_path_factory.mktemp("search"), corpus(), candidates=5, text_index=request.param,
                     vector_copy=request.param)
    engine = Searcher(settings)
    yield engine
    engine.close()


# -- upstream's defect: window and filters before the cut, offset honoured ------------------------
def test_window_applied_before_the_cut(searcher: Searcher) -> None:
    # 130 older rows outrank the recent one semantically; with the window after the top-100 cut
    # (upstream) the recent match vanishes. Semantic only: lexical cannot rescue it here.
    naive = searcher.vector.nearest(searcher.vector.embed("database connection pool timeout"), 25)
    assert (Kind.OBSERVATION, 131) not in [(h.kind, h.id) for h in naive]  # the trap is set
    resp = searcher.search(SearchRequest(query="database connection pool timeout", mode=Mode.SEMANTIC, limit=5))
    exact_path = "vector_copy" if searcher.settings.vector_copy else "vector_exact"
    assert resp.mode is Mode.SEMANTIC and exact_path in resp.timings_ms
    assert resp.results, resp
    assert resp.results[0].id == 131 and resp.results[0].kind is Kind.OBSERVATION
    assert all(r.created_at_epoch and r.created_at_epoch >= NOW_MS - 90 * DAY_MS for r in resp.results)


def test_window_reports_what_it_excluded(searcher: Searcher) -> None:
    resp = searcher.search(SearchRequest(query="database connection pool timeout", window_days=90))
    assert resp.window.days == 90 and resp.window.source == "window"
    assert resp.excluded_by_window >= 100
    everything = searcher.search(SearchRequest(query="database connection pool timeout", window_days=0, limit=200))
    assert everything.excluded_by_window == 0 and len(everything.results) >= 131


def test_filters_before_the_cut(searcher: Searcher) -> None:
    resp = searcher.search(SearchRequest(
        query="database connection pool timeout", filters=Filters(types=("bugfix",)), window_days=0,
        mode=Mode.SEMANTIC))
    assert [r.id for r in resp.results] == [131]
    by_file = searcher.find_by(SearchRequest(filters=Filters(files=("grid.css",)), window_days=0))
    assert [r.id for r in by_file.results] == [132]
    by_concept = searcher.find_by(SearchRequest(query="layout", filters=Filters(concepts=("pattern",)), window_days=0))
    assert [r.id for r in by_concept.results] == [132]
    assert [r.id for r in searcher.find_by_concept("pattern", window_days=0).results] == [132]
    assert [r.id for r in searcher.find_by_file("grid.css", "anything", window_days=0).results] == [132]
    bugfixes = searcher.find_by_type("bugfix", window_days=0)
    assert [r.id for r in bugfixes.results] == [131] and bugfixes.total == 1


def test_offset_pages_through_results(searcher: Searcher) -> None:
    two = searcher.search(SearchRequest(query="connection pool timeout", window_days=0, limit=2))
    second = searcher.search(SearchRequest(query="connection pool timeout", window_days=0, limit=1, offset=1))
    assert [r.key for r in second.results] == [two.results[1].key]


def test_project_includes_merged_projects(searcher: Searcher) -> None:
    resp = searcher.search(SearchRequest(query="caching", filters=Filters(project="alpha"), window_days=0))
    assert 134 in [r.id for r in resp.results if r.kind is Kind.OBSERVATION]
    beta = searcher.search(SearchRequest(query="caching pasta", filters=Filters(project="beta"), window_days=0))
    assert {r.project for r in beta.results} == {"beta"}


# -- upstream's defect: relevance order survives hydration ---------------------------------------
def test_relevance_order_is_not_resorted_by_date(searcher: Searcher) -> None:
    resp = searcher.search(SearchRequest(query="layout engine CSS grid", window_days=0, limit=5))
    assert resp.results[0].id == 132  # 10 days old, yet first: newer rows match less
    dates = [r.created_at_epoch for r in resp.results]
    assert dates != sorted(dates, reverse=True)
    newest = searcher.search(SearchRequest(
        query="layout engine CSS grid pool", window_days=0, limit=5, order=Order.NEWEST))
    ndates = [r.created_at_epoch for r in newest.results]
    assert ndates == sorted(ndates, reverse=True)


# -- upstream's defect: kinds never confused --------------------------------------------------------
def test_id_spaces_are_separate(tmp_path: Path) -> None:
    records = [o(f"observation text {i}", 1) for i in range(1, 6)]
    records += [s(f"summary text {i}", 1) for i in range(1, 6)]
    records += [p(f"prompt text {i}", 1, number=i) for i in range(1, 6)]
    records[4]["narrative"] = "zebra crossing observation"
    records[9]["learned"] = records[9]["request"] = "giraffe summary"
    records[14]["prompt_text"] = "okapi prompt"
    engine = Searcher(build(tmp_path, records))
    try:
        for word, kind, text_key in (("zebra", Kind.OBSERVATION, "narrative"), ("giraffe", Kind.SUMMARY, "learned"),
                                     ("okapi", Kind.PROMPT, "prompt_text")):
            resp = engine.search(SearchRequest(query=word, window_days=0, limit=3))
            top = resp.results[0]
            assert (top.kind, top.id) == (kind, 5)
            rows, missing = engine.get(kind, [5])
            assert word in rows[0][text_key] and not missing
        rows, missing = engine.get(Kind.PROMPT, [3, 5, 99])
        assert [r["id"] for r in rows] == [3, 5] and missing == [99]
    finally:
        engine.close()


# -- upstream's defect: epoch milliseconds -----------------------------------------------------------
def test_window_uses_milliseconds(searcher: Searcher) -> None:
    resp = searcher.search(SearchRequest(query="billing service pool", window_days=90, limit=50))
    assert all(r.created_at_epoch and r.created_at_epoch > NOW_MS - 90 * DAY_MS for r in resp.results)
    assert resp.window.start_ms is not None and abs(resp.window.start_ms - (NOW_MS - 90 * DAY_MS)) < 600_000


# -- degradation: Chroma down, full text answers ---------------------------------------------------
@pytest.mark.slow  # a real chroma run server
def test_managed_server_down_falls_back_to_lexical(tmp_path: Path) -> None:
    settings = build(tmp_path, corpus()[125:], chroma_mode="managed", chroma_port=free_port())
    # resync started and stopped its own managed server: nothing is running now.
    engine = Searcher(settings)
    try:
        resp = engine.search(SearchRequest(query="postgres pooled connection stalled", window_days=0))
        assert resp.mode is Mode.LEXICAL_FALLBACK
        assert resp.reason and "Chroma" in resp.reason
        assert resp.results and resp.results[0].signals is Signal.LEXICAL
    finally:
        engine.close()


@pytest.mark.slow  # a real chroma run server
def test_real_server_up_then_stopped(tmp_path: Path) -> None:
    from memsync.chroma.server import ManagedServer

    settings = build(tmp_path, corpus()[125:], chroma_mode="managed", chroma_port=free_port())
    server = ManagedServer(settings)
    server.ensure()
    engine = Searcher(settings)
    try:
        up = engine.search(SearchRequest(query="postgres pooled connection stalled", window_days=0))
        assert up.mode is Mode.HYBRID and up.results
        server.stop()
        down = engine.search(SearchRequest(query="postgres pooled connection stalled", window_days=0))
        assert down.mode is Mode.LEXICAL_FALLBACK and down.results
        assert [r.key for r in down.results][:1] == [r.key for r in up.results][:1]
    finally:
        engine.close()
        server.stop()


# -- timeline -----------------------------------------------------------------------------------------
def test_timeline_around_each_anchor_type(searcher: Searcher) -> None:
    for anchor, key in (("131", (Kind.OBSERVATION, 131)), ("#132", (Kind.OBSERVATION, 132)),
                        ("S1", (Kind.SUMMARY, 1)), ("P1", (Kind.PROMPT, 1))):
        results, got = searcher.timeline(anchor, 2, 2)
        assert got == key
        marked = [r.key for r in results if r.field == "anchor"]
        assert marked == [key]
        dates = [r.created_at_epoch for r in results]
        assert dates == sorted(dates)
        assert len(results) <= 5
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((NOW_MS - 4.5 * DAY_MS) / 1000))
    results, key = searcher.timeline(when, 1, 1)
    assert key == (Kind.OBSERVATION, 134)  # the first record at or after the timestamp


def test_timeline_query_anchor_is_the_best_match_not_the_newest(searcher: Searcher) -> None:
    results, key = searcher.timeline("CSS grid layout engine", 1, 1)
    assert key == (Kind.OBSERVATION, 132)


def test_timeline_bad_anchor(searcher: Searcher) -> None:
    with pytest.raises(SearchError, match="no summary with id 999"):
        searcher.timeline("S999")


@pytest.mark.parametrize("anchor", ["0", "S0", "P-1", "#-2", "9" * 20])
def test_timeline_anchor_shaped_like_an_id_but_invalid_is_refused(searcher: Searcher, anchor: str) -> None:
    """Such an anchor used to become a text query and answer a timeline of anything."""
    with pytest.raises(SearchError, match="out of range"):
        searcher.timeline(anchor)


def test_ids_past_sqlites_range_never_reach_sqlite(searcher: Searcher) -> None:
    """10**30 used to overflow in SQLite (OverflowError, an empty MCP error)."""
    with pytest.raises(SearchError, match="out of range"):
        searcher.similar(10**30)
    found, missing = searcher.get(Kind.OBSERVATION, [10**30, 131])
    assert [r["id"] for r in found] == [131] and missing == [10**30]


def test_similar_flags_near_duplicates(tmp_path: Path) -> None:
    records = [o("The cache key ignored the locale so French users saw English pages", 2),
               o("The cache key ignored the locale so French users saw English pages.", 1),
               o("Bumped the linter version", 1)]
    engine = Searcher(build(tmp_path, records))
    try:
        results, mode, _ = engine.similar(1)
        assert mode is Mode.SEMANTIC
        assert results[0].key == (Kind.OBSERVATION, 2) and results[0].field == "near_duplicate"
        assert all(r.key != (Kind.OBSERVATION, 1) for r in results)
        assert results[-1].field != "near_duplicate"
    finally:
        engine.close()


def test_recent_context_newest_first(searcher: Searcher) -> None:
    recent = searcher.recent_context("alpha", 3)
    assert [r.kind for r in recent][0] is Kind.SUMMARY
    dates = [r.created_at_epoch for r in recent]
    assert dates == sorted(dates, reverse=True)


def test_database_without_fts_uses_own_index(tmp_path: Path) -> None:
    settings = Settings(db=tmp_path / "legacy.db", data_dir=tmp_path / "data", chroma_mode="embedded",
                        min_confidence=0)
    make_db(settings.db, [o("legacy zebra crossing note", 1), p("legacy okapi prompt", 1)], era=Era.LEGACY,
            fts=False)
    engine = Searcher(settings)
    try:
        resp = engine.search(SearchRequest(query="zebra crossings", window_days=0, mode=Mode.LEXICAL))
        assert [(r.kind, r.id) for r in resp.results] == [(Kind.OBSERVATION, 1)]
        from memsync.worker.seed.importer import import_records

        import_records(settings.db, [o("a later zebra sighting", 0.5)])
        again = engine.search(SearchRequest(query="zebra", window_days=0, mode=Mode.LEXICAL))
        assert {r.id for r in again.results} == {1, 2}
        assert engine.search(SearchRequest(
            query="anything", window_days=0)).mode is Mode.LEXICAL_FALLBACK  # nothing synced
    finally:
        engine.close()
    assert (settings.data_dir / "lexical.db").exists()




@given(text=st.text(max_size=200))
@hyp_settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_query_string_lexical_and_hybrid(searcher: Searcher, text: str) -> None:
    for mode in (Mode.LEXICAL, Mode.HYBRID):
        resp = searcher.search(SearchRequest(query=text, mode=mode, window_days=0, limit=5))
        assert resp.mode in (mode, Mode.LEXICAL)  # LEXICAL: no words, newest rows listed
        # A score is a confidence in 0..1, or None where none was asked for (a listing: no words).
        assert all(r.score is None or 0.0 <= r.score <= 1.0 for r in resp.results)
        listing = resp.reason == "no words in the query: newest records listed"
        assert listing or all(r.score is not None for r in resp.results)


@pytest.mark.parametrize("text", ["", '"', "AND OR NOT", "NEAR(a b)", "title:x", "a*", "^x", "(((", "\x00",
                                  "x" * 100_000, "🚀 日本語", "connection\x00pool"])
def test_hostile_queries_hybrid(searcher: Searcher, text: str) -> None:
    resp = searcher.search(SearchRequest(query=text, window_days=0))
    assert resp.mode in (Mode.HYBRID, Mode.LEXICAL)


def test_hybrid_on_a_legacy_database(tmp_path: Path) -> None:
    records = [p("legacy question about the okapi migration", 1, project="old"),
               o("the okapi migration finished", 1, project="old")]
    settings = Settings(db=tmp_path / "legacy.db", data_dir=tmp_path / "data", chroma_mode="embedded",
                        min_confidence=0)
    make_db(settings.db, records, era=Era.LEGACY, fts=False)
    resync(settings)
    engine = Searcher(settings)
    try:
        resp = engine.search(SearchRequest(query="okapi migration", filters=Filters(project="old"), window_days=0))
        assert resp.mode is Mode.HYBRID
        assert {(r.kind, r.project) for r in resp.results} == {(Kind.PROMPT, "old"), (Kind.OBSERVATION, "old")}
        assert all(r.signals is Signal.BOTH for r in resp.results)
    finally:
        engine.close()


def test_exact_filtered_path_with_and_without_sync_records(tmp_path: Path) -> None:
    from memsync.config.formats.sync_records import synced_doc_ids

    records = [*OLD_NEAR[:40], RECENT_FAR]
    settings = build(tmp_path, records, candidates=2, vector_copy=False)
    engine = Searcher(settings)
    try:
        collection = engine.vector.collection_name()
        assert synced_doc_ids(settings.state_path, collection, Kind.OBSERVATION, [41]) == ["obs_41_narrative"]
        first = engine.search(SearchRequest(query="database connection pool timeout", mode=Mode.SEMANTIC, limit=2))
        assert "vector_exact" in first.timings_ms and first.results[0].id == 41
        settings.state_path.rename(tmp_path / "moved.db")  # a search server on another machine
        assert synced_doc_ids(settings.state_path, collection, Kind.OBSERVATION, [41]) is None
        second = engine.search(SearchRequest(query="database connection pool timeout", mode=Mode.SEMANTIC, limit=2))
        assert [r.key for r in second.results] == [r.key for r in first.results]
    finally:
        engine.close()


def test_linked_evidence_only_for_prompts_alone(tmp_path: Path) -> None:
    records = [o("zebra crossing repainted on the main road", 1, session="day", prompt_number=1),
               {**p("what should we have for lunch", 1, number=1), "session": "day"},
               p("another unrelated question about taxes", 1, number=2)]
    engine = Searcher(build(tmp_path, records))
    try:
        mixed = engine.search(SearchRequest(query="zebra crossing", window_days=0))
        assert mixed.results[0].key == (Kind.OBSERVATION, 1)
        assert (Kind.PROMPT, 1) not in [r.key for r in mixed.results if r.signals is not Signal.SEMANTIC]
        prompts = engine.search(SearchRequest(query="zebra crossing", kinds=[Kind.PROMPT], window_days=0))
        assert prompts.results[0].key == (Kind.PROMPT, 1)  # vouched for by its observation
    finally:
        engine.close()
