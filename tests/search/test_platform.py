"""The platform filter: claude-mem's ``platform_source``, normalised as upstream does,
applied before any top-N cut on every path (hybrid, semantic, lexical; with memsync's own indexes
and with FTS5 and Chroma alone), on real SQLite files and a real embedded Chroma."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from memsync.config.claude_mem.platform import normalize_platform
from memsync.config.claude_mem.schema import Era, Kind
from memsync.config.settings import Settings
from memsync.search import Filters, Mode, Searcher, SearchRequest
from memsync.worker.pipeline.resync import resync
from tests.conftest import make_db

DAY_MS = 86_400_000
NOW_MS = int(time.time() * 1000)


@pytest.mark.parametrize(("stored", "platform"), [
    (None, "claude"), ("", "claude"), ("   ", "claude"), ("claude", "claude"), ("Claude Code", "claude"),
    ("claude-desktop", "claude"), ("transcript", "codex"), ("Codex CLI", "codex"), ("openai-codex", "codex"),
    ("Cursor", "cursor"), ("cursor-agent", "cursor"), ("  Wind  Surf ", "wind-surf"), ("gemini", "gemini"),
])
def test_values_are_normalised_as_upstream_does(stored: str | None, platform: str) -> None:
    assert normalize_platform(stored) == platform


def obs(i: int, text: str, platform: str, days_ago: float) -> dict[str, Any]:
    return {"kind": "observation", "project": "alpha", "session": f"{platform}-{i}", "platform_source": platform,
            "type": "discovery", "title": text[:40], "narrative": text, "facts": [], "concepts": [],
            "files_read": [], "files_modified": [], "prompt_number": 1,
            "created_at_epoch": int(NOW_MS - days_ago * DAY_MS)}


# 60 rows recorded by Claude (under the names hooks used before normalisation as well) outrank the
# one Codex row on meaning: a filter applied after a top-N cut would lose it.
CLAUDE = [obs(i, f"Database connection pool timeout number {i} in the billing service",
              ("claude", "Claude Code", "")[i % 3], 5 + i) for i in range(60)]
CODEX = obs(100, "Requests to Postgres stalled because every pooled connection was busy", "codex-cli", 3)
CURSOR_PROMPT = {"kind": "prompt", "project": "alpha", "session": "cursor-p", "platform_source": "Cursor",
                 "prompt_number": 1, "prompt_text": "why does the connection pool time out",
                 "created_at_epoch": NOW_MS - 2 * DAY_MS}


@pytest.fixture(scope="module", params=[True, False], ids=["own-indexes", "fts5-and-chroma-only"])
def searcher(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("platform")
    settings = Settings(db=tmp / "claude-mem.db", data_dir=tmp / "data", chroma_mode="embedded", candidates=5,
                        min_confidence=0, text_index=request.param, vector_copy=request.param)
    make_db(settings.db, [*CLAUDE, CODEX, CURSOR_PROMPT])
    resync(settings)
    engine = Searcher(settings)
    yield engine
    engine.close()


@pytest.mark.parametrize("mode", [Mode.HYBRID, Mode.SEMANTIC, Mode.LEXICAL])
@pytest.mark.parametrize("window_days", [0, 90])
def test_a_platform_filter_applies_before_the_cut(searcher: Searcher, mode: Mode, window_days: int) -> None:
    query = "database connection pool timeout" if mode is not Mode.LEXICAL else "connection"
    codex = searcher.search(SearchRequest(
        query=query, kinds=(Kind.OBSERVATION,), filters=Filters(platform="codex"), mode=mode, window_days=window_days,
        limit=5))
    assert codex.mode is mode and [r.id for r in codex.results] == [61]
    # "Claude Code" and "" were recorded by claude as well: all of them, and nothing else.
    claude = searcher.search(SearchRequest(
        query=query, kinds=(Kind.OBSERVATION,), filters=Filters(platform=" Claude "), mode=mode,
        window_days=window_days, limit=100))
    assert sorted(r.id for r in claude.results) == list(range(1, 61))
    assert searcher.search(SearchRequest(
        query=query, filters=Filters(platform="windsurf"), mode=mode, window_days=window_days)).results == []


def test_prompts_take_the_platform_of_their_session(searcher: Searcher) -> None:
    resp = searcher.search(SearchRequest(
        query="connection pool", kinds=(Kind.PROMPT,), filters=Filters(platform="cursor")))
    assert [(r.kind, r.id) for r in resp.results] == [(Kind.PROMPT, 1)]
    assert searcher.search(SearchRequest(
        query="connection pool", kinds=(Kind.PROMPT,), filters=Filters(platform="claude"))).results == []


def test_chroma_metadata_holds_the_normalised_platform(searcher: Searcher) -> None:
    got = searcher.vector._open().get(where={"sqlite_id": 2}, include=["metadatas"])
    assert {m["platform_source"] for m in got["metadatas"]} == {"claude"}  # stored as "Claude Code"


def test_a_file_without_platforms_is_all_claude(tmp_path: Path) -> None:
    settings = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="embedded",
                        min_confidence=0)
    make_db(settings.db, [obs(1, "connection pool timeout", "codex", 1)], era=Era.LEGACY)
    resync(settings)
    engine = Searcher(settings)
    try:
        assert [r.id for r in engine.search(SearchRequest(
            query="connection pool", filters=Filters(platform="claude"))).results] == [1]
        assert engine.search(SearchRequest(query="connection pool", filters=Filters(platform="codex"))).results == []
    finally:
        engine.close()


def test_a_prompt_without_a_session_is_kept_without_a_project(tmp_path: Path) -> None:
    # Upstream's sync joins prompts to their session and so never indexes one whose session_db_id is
    # NULL (or whose session was deleted). memsync keeps them: the user's words are memory too. With
    # no session they have no project (a project filter leaves them out) and count as claude's.
    settings = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="embedded",
                        min_confidence=0)
    make_db(settings.db, [{**CURSOR_PROMPT, "prompt_text": "rotate the signing keys before the release"}])
    conn = sqlite3.connect(settings.db)
    with conn:
        conn.execute("UPDATE user_prompts SET session_db_id = NULL")
    conn.close()
    assert resync(settings).added == 1
    engine = Searcher(settings)
    try:
        for mode in (Mode.HYBRID, Mode.LEXICAL):
            resp = engine.search(SearchRequest(query="signing keys", mode=mode))
            assert [(r.kind, r.id, r.project) for r in resp.results] == [(Kind.PROMPT, 1, None)], mode
        assert [r.id for r in engine.search(SearchRequest(
            query="signing keys", filters=Filters(platform="claude"))).results] == [1]
        assert engine.search(SearchRequest(query="signing keys", filters=Filters(project="alpha"))).results == []
    finally:
        engine.close()
