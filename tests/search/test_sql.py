"""The read-only connection (time limit) and filters/window as SQL, on real files of both schema eras."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memsync.config.claude_mem.schema import Era, Kind
from memsync.config.inlists import chunks
from memsync.config.settings import Settings
from memsync.search.models import Filters, Scope, Window
from memsync.search.sql import QueryTimeout, SourceRows
from tests.conftest import BASE_MS, make_db, obs, prompt, summary


def open_rows(tmp: Path, era: Era = Era.CURRENT, statement_ms: int = 2000) -> SourceRows:
    db = make_db(tmp / "claude-mem.db", [
        obs(1, concepts=["50%_off"], files_modified=["web/grid.css"], prompt_number=2),  # session alpha-s0
        obs(2, type="feature", concepts=["500_off"]),
        obs(3, project="old", merged_into_project="alpha"),
        obs(8, project="beta"),
        summary(1, files_edited=["web/grid.css"]),
        prompt(1),  # alpha-s0, prompt_number 2
        prompt(9, project="beta"),
    ], era=era)
    return SourceRows(db, statement_ms=statement_ms)


@pytest.fixture(params=[Era.CURRENT, Era.LEGACY], ids=["current", "legacy"])
def rows(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SourceRows]:
    r = open_rows(tmp_path, request.param)
    yield r
    r.close()


def test_a_runaway_statement_is_interrupted_and_the_connection_stays_usable(tmp_path: Path) -> None:
    rows = open_rows(tmp_path, statement_ms=50)
    try:
        with pytest.raises(QueryTimeout, match="50 ms"):
            rows.query("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n")
        assert rows.max_id(Kind.OBSERVATION) == 4
    finally:
        rows.close()


def test_open_uses_the_settings(tmp_path: Path) -> None:
    rows = open_rows(tmp_path)
    rows.close()
    opened = SourceRows.open(Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", fts_timeout_ms=123))
    try:
        assert opened.statement_ms == 123 and opened.uri.endswith("claude-mem.db?mode=ro")
    finally:
        opened.close()


def test_project_includes_merged_rows_and_prompts_take_their_sessions(rows: SourceRows) -> None:
    alpha = Filters(project="alpha")
    merged = {3} if rows.col(Kind.OBSERVATION, "merged_into_project") else set()  # the legacy era has no merges
    assert rows.passing(Kind.OBSERVATION, [1, 2, 3, 4], alpha, None) == {1, 2} | merged
    assert rows.passing(Kind.PROMPT, [1, 2], alpha, None) == {1}
    assert rows.count(Kind.PROMPT, Filters(project="beta"), None) == 1
    both = Filters(project=("beta", "alpha"))  # several projects: a row of any of them
    assert rows.passing(Kind.OBSERVATION, [1, 2, 3, 4], both, None) == {1, 2, 4} | merged
    assert rows.passing(Kind.PROMPT, [1, 2], both, None) == {1, 2}
    assert rows.count(Kind.PROMPT, Filters(project=("beta", "gamma")), None) == 1
    assert Filters(project=("beta", "", "beta")).projects() == ("beta",) and Filters(project="").projects() == ()


def test_like_filters_are_substrings_not_patterns(rows: SourceRows) -> None:
    assert rows.passing(Kind.OBSERVATION, [1, 2, 3], Filters(concepts=("50%_",)), None) == {1}
    assert rows.passing(Kind.OBSERVATION, [1, 2, 3], Filters(concepts=("0%",)), None) == {1}
    assert rows.passing(Kind.OBSERVATION, [1, 2, 3], Filters(concepts=("0_",)), None) == {2}
    files = Filters(files=("grid.css",))
    assert rows.passing(Kind.OBSERVATION, [1, 2], files, None) == {1}
    assert rows.passing(Kind.SUMMARY, [1], files, None) == {1}


def test_filters_that_a_kind_cannot_have_exclude_it(rows: SourceRows) -> None:
    assert not rows.applicable(Kind.SUMMARY, Filters(types=("bugfix",)))
    assert not rows.applicable(Kind.PROMPT, Filters(files=("x",)))
    assert rows.applicable(Kind.SUMMARY, Filters(files=("x",)))
    assert rows.passing(Kind.PROMPT, [1], Filters(files=("x",)), None) == set()
    assert rows.filtered_ids(Kind.SUMMARY, Filters(concepts=("gotcha",)), None, 10) == []
    assert rows.passing(Kind.OBSERVATION, [1, 2], Filters(types=("feature", "nothing")), None) == {2}


def test_window_and_the_id_bound_it_gives(rows: SourceRows) -> None:
    window = Window(0, BASE_MS + 2000, BASE_MS + 3000, "date_range")
    assert rows.passing(Kind.OBSERVATION, [1, 2, 3, 4], Filters(), window) == {2, 3}
    assert rows.first_id_since(Kind.OBSERVATION, BASE_MS + 2000) <= 2  # a lower bound: nothing in the window lost
    assert rows.first_id_since(Kind.OBSERVATION, BASE_MS + 10**9) == 5  # nothing that new: past the last id
    assert rows.filtered_ids(Kind.OBSERVATION, Filters(), window, 10) == [3, 2]  # newest first
    assert rows.filtered_ids(Kind.OBSERVATION, Filters(), None, 3) is None  # more than the cap


def test_listings(rows: SourceRows) -> None:
    assert rows.distinct(Kind.OBSERVATION, "type") == ["bugfix", "feature"]
    assert [i for i, _ in rows.recent(Kind.OBSERVATION, Scope(), 2)] == [4, 3]
    assert [i for i, _ in rows.recent(Kind.OBSERVATION, Scope(), 2, newest=False)] == [1, 2]
    assert [i for i, _ in rows.around(Kind.OBSERVATION, BASE_MS + 2000, None, "<", 5)] == [1]
    assert [i for i, _ in rows.around(Kind.OBSERVATION, BASE_MS + 2000, "beta", ">=", 5)] == [4]
    assert [i for i, _ in rows.around(Kind.OBSERVATION, BASE_MS + 2000, None, ">=", 2)] == [2, 3]


def test_chunks() -> None:
    assert list(chunks(list(range(5)), 2)) == [[0, 1], [2, 3], [4]]
    assert list(chunks([])) == []
