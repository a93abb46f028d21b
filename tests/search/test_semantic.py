"""The semantic side's strategies (pick by cost, lose nothing): whichever answers a
restricted search (the local vector copy, exact by id, a Chroma ``where``), the rows are the same, and
none is lost to the unfiltered top-N. Real SQLite, embedded Chroma and the shipped model."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from memsync.config.claude_mem.schema import Kind
from memsync.config.settings import Settings
from memsync.search import Filters, Mode, Searcher, SearchRequest
from memsync.worker.pipeline.resync import resync
from tests.conftest import make_db

DAY_MS = 86_400_000
NOW_MS = int(time.time() * 1000)
QUERY = "database connection pool timeout"
STRATEGIES = {  # settings that make each strategy answer a restricted search, and its timing key
    "vector copy": ({"vector_copy": True}, "vector_copy"),
    "exact by id": ({"vector_copy": False}, "vector_exact"),
    "chroma where": ({"vector_copy": False, "filter_ids_cap": 1}, "vector_exact"),
}


def o(text: str, days_ago: float, **extra: Any) -> dict[str, Any]:
    return {"kind": "observation", "project": "alpha", "session": f"s{int(days_ago)}", "type": "discovery",
            "title": text[:40], "narrative": text, "created_at_epoch": int(NOW_MS - days_ago * DAY_MS), **extra}


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    tmp: Path = tmp_path_factory.mktemp("semantic")
    records = [o(f"Database connection pool timeout number {i} in the billing service", 200 + i) for i in range(40)]
    records += [o("Requests to Postgres stalled because every pooled connection was busy", 3, type="bugfix"),
                o("The pool of workers timed out on the billing database", 5, type="bugfix", project="beta"),
                o("Dark mode colours in the dashboard", 2, type="feature"),
                o("Bumped the linter version", 1)]
    s = Settings(db=tmp / "claude-mem.db", data_dir=tmp / "data", chroma_mode="embedded", candidates=2,
                 min_confidence=0)  # what retrieval finds, not the lists' cutoff (tested on its own)
    make_db(s.db, records)
    resync(s)
    return s


def run(settings: Settings, filters: Filters, window_days: int) -> tuple[list[tuple[Kind, int]], set[str]]:
    engine = Searcher(settings)
    try:
        resp = engine.search(SearchRequest(
            query=QUERY, filters=filters, window_days=window_days, limit=3, mode=Mode.SEMANTIC))
    finally:
        engine.close()
    assert resp.mode is Mode.SEMANTIC
    return [r.key for r in resp.results], set(resp.timings_ms)


@pytest.mark.parametrize(("filters", "window_days"), [(Filters(), 90), (Filters(types=("bugfix",)), 0),
                                                      (Filters(project="alpha"), 30)],
                         ids=["window", "types", "project-and-window"])
def test_every_strategy_finds_the_same_rows(synced: Settings, filters: Filters, window_days: int) -> None:
    found = {}
    for name, (overrides, timing) in STRATEGIES.items():
        keys, timings = run(synced.model_copy(update=overrides), filters, window_days)
        assert timing in timings, (name, timings)
        found[name] = keys
    assert found["exact by id"] == found["chroma where"]
    assert set(found["vector copy"]) == set(found["exact by id"])  # int8 scores may swap near ties
    assert (Kind.OBSERVATION, 41) in found["exact by id"]  # outranked by 40 older rows in the plain top-N


def test_several_projects_are_one_filter_in_every_strategy(synced: Settings) -> None:
    """A worktree's hook asks for the worktree's project and its repository's at once."""
    for name, (overrides, timing) in STRATEGIES.items():
        settings = synced.model_copy(update=overrides)
        beta, timings = run(settings, Filters(project="beta"), 30)
        assert timing in timings, (name, timings)
        assert beta == [(Kind.OBSERVATION, 42)], name
        for names in (("beta", "gamma"), ("alpha", "beta")):  # the same strategy answers several names
            keys, timings = run(settings, Filters(project=names), 30)
            assert timing in timings, (name, names, timings)
            if names == ("beta", "gamma"):
                assert keys == beta, name  # gamma has no rows
            else:
                assert {(Kind.OBSERVATION, 41), (Kind.OBSERVATION, 42)} <= set(keys), name


def test_unrestricted_search_is_the_plain_top_n(synced: Settings) -> None:
    keys, timings = run(synced, Filters(), 0)
    assert "vector_query" in timings and not {"vector_copy", "vector_exact", "vector_overfetch"} & timings
    assert len(keys) == 3
