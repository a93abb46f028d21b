"""Prompts ranked in the context of their neighbours (search.context), on real claude-mem files of
both schema eras; vectors from a stand-in for the vector copy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from memsync.config.claude_mem.schema import Era, Kind
from memsync.search import context
from memsync.search.models import Filters, Scope, Window
from memsync.search.sql import SourceRows
from tests.conftest import FakeVectorCopy, make_db, prompt

NO_WINDOW = Window(None, None, None, "all_time")


def unit(*parts: float) -> npt.NDArray[np.float32]:
    v = np.array([parts], np.float32)
    return v / np.linalg.norm(v)


@pytest.fixture(params=[Era.CURRENT, Era.LEGACY], ids=["current", "legacy"])
def rows(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SourceRows]:
    # Session a: prompts 1, 2, 3 (numbers 1-3); session b: prompt 4 (number 2), in project beta;
    # session c: prompts 5 and 6 numbered 1 and 4 (a gap: prompts never recorded or deleted).
    records = [prompt(i, session="alpha-a", prompt_number=i) for i in (1, 2, 3)]
    records.append(prompt(4, project="beta", session="beta-b", prompt_number=2))
    records += [prompt(5, session="alpha-c", prompt_number=1), prompt(6, session="alpha-c", prompt_number=4)]
    r = SourceRows(make_db(tmp_path / "claude-mem.db", records, era=request.param))
    yield r
    r.close()


def test_neighbours_are_the_prompts_numbered_next_to_it_in_its_session(rows: SourceRows) -> None:
    got = rows.neighbour_prompts([1, 2, 4, 5, 6])
    assert sorted(got[2]) == [1, 3] and got[1] == [2] and 4 not in got
    assert got[5] == [6] and got[6] == [5]  # the gap in the numbering is stepped over


def test_a_terse_prompt_is_lifted_by_the_prompts_around_it(rows: SourceRows) -> None:
    # Query axis 0 ("TLS certificates"). Prompt 2 says "yes, do that" (axis 2); prompts 1 and 3
    # are about certificates; prompt 4 alone is half about them.
    vectors = {(Kind.PROMPT, 1): unit(1, 0.2, 0), (Kind.PROMPT, 2): unit(0, 0, 1),
               (Kind.PROMPT, 3): unit(1, 0.4, 0), (Kind.PROMPT, 4): unit(0.3, 1, 0)}
    query = unit(1, 0, 0)[0]
    dense_order = [1, 3, 4, 2]
    got = context.ranking(rows, FakeVectorCopy(vectors), query, dense_order, Scope(Filters(), NO_WINDOW))
    assert got.index(2) < got.index(4)  # in context, "yes, do that" is about certificates
    assert set(got) == {1, 2, 3, 4}  # session c's prompts were not found and have no neighbour here


def test_neighbours_join_the_ranking_only_within_the_filters(rows: SourceRows) -> None:
    vectors = {(Kind.PROMPT, i): unit(1, i, 0) for i in (1, 2, 3, 4)}
    query = unit(1, 0, 0)[0]
    assert sorted(context.ranking(rows, FakeVectorCopy(vectors), query, [1], Scope(Filters(), NO_WINDOW))) == [1, 2]
    assert context.ranking(rows, FakeVectorCopy(vectors), query, [4], Scope(Filters(project="beta"), NO_WINDOW)) == [4]
    assert context.ranking(rows, FakeVectorCopy({}), query, [1], Scope(Filters(), NO_WINDOW)) == []
    assert context.ranking(rows, FakeVectorCopy(vectors), query, [], Scope(Filters(), NO_WINDOW)) == []
