"""Hydration: full records from either schema era, and a page turned into results in its own order."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memsync.config.claude_mem.schema import Era, Kind
from memsync.search.hydrate import TITLE_CHARS, PageEntry, records, results, title_of
from memsync.search.models import Format, Signal
from memsync.search.sql import SourceRows
from memsync.search.vectorstore import RowHit
from tests.conftest import make_db, obs, prompt, summary


@pytest.fixture(params=[Era.CURRENT, Era.LEGACY], ids=["current", "legacy"])
def rows(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SourceRows]:
    make_db(tmp_path / "claude-mem.db", [obs(1), obs(2, title="", subtitle="", narrative="x " * 200),
                                         summary(1), prompt(1, "beta")], era=request.param)
    r = SourceRows(tmp_path / "claude-mem.db")
    yield r
    r.close()


def test_records_have_logical_names_parsed_lists_and_the_prompts_project(rows: SourceRows) -> None:
    found = records(rows, Kind.OBSERVATION, [1, 1, 99])
    assert list(found) == [1]
    assert found[1]["facts"] == ["fact 1.0", "fact 1.1"] and found[1]["files_read"] == ["src/m1.py"]
    assert found[1]["kind"] == "observation" and found[1]["narrative"].startswith("Narrative number 1")
    assert records(rows, Kind.PROMPT, [1])[1]["project"] == "beta"
    assert records(rows, Kind.SUMMARY, []) == {}


def test_a_page_keeps_its_order_and_drops_deleted_rows(rows: SourceRows) -> None:
    page = [PageEntry((Kind.PROMPT, 1), 0.9, True, True), PageEntry((Kind.OBSERVATION, 99), 0.8, False, True),
            PageEntry((Kind.OBSERVATION, 2), 0.7, True, False), PageEntry((Kind.SUMMARY, 1), 0.5, False, True)]
    hits = {(Kind.OBSERVATION, 2): RowHit(Kind.OBSERVATION, 2, 0.66, "narrative")}
    got = results(rows, page, hits, Format.INDEX)
    assert [r.key for r in got] == [(Kind.PROMPT, 1), (Kind.OBSERVATION, 2), (Kind.SUMMARY, 1)]
    assert [r.signals for r in got] == [Signal.BOTH, Signal.SEMANTIC, Signal.LEXICAL]
    assert (got[1].similarity, got[1].field, got[1].type) == (0.66, "narrative", "bugfix")
    assert got[0].similarity is None and got[0].type is None and got[0].record is None
    assert results(rows, page[:1], {}, Format.FULL)[0].record is not None


def test_titles(rows: SourceRows) -> None:
    assert title_of(Kind.OBSERVATION, records(rows, Kind.OBSERVATION, [1])[1]) == "Fix bug 1"
    long = title_of(Kind.OBSERVATION, records(rows, Kind.OBSERVATION, [2])[2])  # no title: the narrative
    assert len(long) == TITLE_CHARS and long.endswith("...") and "  " not in long
    assert title_of(Kind.SUMMARY, records(rows, Kind.SUMMARY, [1])[1]) == "Request 1"
    assert title_of(Kind.PROMPT, {"prompt_text": "line one\nline two"}) == "line one line two"
    assert title_of(Kind.PROMPT, {}) == ""
