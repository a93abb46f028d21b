"""Linked evidence (search.links): fan-in and which prompt a row talks about decide its vote, on real
claude-mem files of both schema eras; the vectors come from a stand-in for the vector copy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from memsync.config.claude_mem.schema import Era, Kind
from memsync.search import links
from memsync.search.fusion import Ranked, fuse
from memsync.search.models import Filters, Key, Scope, Window
from memsync.search.sql import SourceRows
from tests.conftest import FakeVectorCopy, make_db, obs, prompt, summary

NO_WINDOW = Window(None, None, None, "all_time")
DIM = 8


def unit(i: int) -> npt.NDArray[np.float32]:
    v = np.zeros((1, DIM), np.float32)
    v[0, i] = 1.0
    return v


@pytest.fixture(params=[Era.CURRENT, Era.LEGACY], ids=["current", "legacy"])
def rows(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SourceRows]:
    # Session alpha-s0: prompts 1..4 (ids 1..4, prompt_number = id). Observation 1 alone under
    # prompt 2 (a precise link); observations 4..7 all under prompt 4 (a coarse link: fan-in 4),
    # observation 5 talking about prompt 1. Summary 1 recorded at prompt 4.
    session = "alpha-s0"
    records = [prompt(i, session=session, prompt_number=i) for i in range(1, 5)]
    records.append(obs(1, session=session, prompt_number=2))
    records += [obs(i, session=session, prompt_number=4) for i in range(4, 8)]
    records.append(summary(1, session=session, prompt_number=4))
    r = SourceRows(make_db(tmp_path / "claude-mem.db", records, era=request.param))
    yield r
    r.close()


def vectors() -> dict[Key, npt.NDArray[np.float32]]:
    out: dict[Key, npt.NDArray[np.float32]] = {(Kind.PROMPT, i): unit(i) for i in range(1, 5)}
    out[(Kind.OBSERVATION, 1)] = unit(1)  # precise link to prompt 2, yet closest to prompt 1
    out[(Kind.OBSERVATION, 5)] = np.vstack([unit(6), unit(1)])  # two documents, one close to prompt 1
    out[(Kind.SUMMARY, 1)] = unit(3)
    return out


def test_a_precise_link_keeps_its_whole_vote_whatever_the_vectors_say(rows: SourceRows) -> None:
    got = links.votes(rows, FakeVectorCopy(vectors()), [[[(Kind.OBSERVATION, 1)]]], Scope(Filters(), NO_WINDOW), 10)[0]
    assert [(v.prompt, v.rank, round(v.share, 6)) for v in got][0] == (2, 0, 1.0)


def test_a_coarse_link_votes_for_the_prompt_the_observation_talks_about(rows: SourceRows) -> None:
    got = links.votes(rows, FakeVectorCopy(vectors()), [[[(Kind.OBSERVATION, 5)]]], Scope(Filters(), NO_WINDOW), 10)[0]
    assert got[0].prompt == 1 and got[0].share > 0.9  # not the recorded prompt 4
    assert {v.prompt for v in got} <= {1, 2, 3, 4}  # only prompts numbered up to its own


def test_without_vectors_a_coarse_link_gets_one_over_its_fan_in(rows: SourceRows) -> None:
    evidence = [[[(Kind.OBSERVATION, 5)], [(Kind.OBSERVATION, 1)]]]
    got = links.votes(rows, None, evidence, Scope(Filters(), NO_WINDOW), 10)[0]
    shares = {v.prompt: round(v.share, 6) for v in got}
    assert shares == {4: 0.25, 2: 1.0}  # four observations under prompt 4, one under prompt 2
    assert [v.prompt for v in got] == [2, 4]  # the stronger vote first


def test_summaries_vote_for_the_prompt_they_are_closest_to(rows: SourceRows) -> None:
    got = links.votes(rows, FakeVectorCopy(vectors()), [[[(Kind.SUMMARY, 1)]]], Scope(Filters(), NO_WINDOW), 10)[0]
    assert got[0].prompt == 3 and got[0].share > 0.9


def test_each_prompt_keeps_its_strongest_vote_and_filters_apply(rows: SourceRows) -> None:
    evidence = [[(Kind.OBSERVATION, 5), (Kind.OBSERVATION, 1)]]
    got = links.votes(rows, FakeVectorCopy(vectors()), [evidence], Scope(Filters(), NO_WINDOW), 10)[0]
    assert [v.prompt for v in got if v.share > 0.5] == [1, 2]
    beta = Scope(Filters(project="beta"), NO_WINDOW)
    assert links.votes(rows, FakeVectorCopy(vectors()), [evidence], beta, 10)[0] == []


def test_rows_without_a_prompt_number_or_unknown_ids_vote_for_nothing(rows: SourceRows) -> None:
    assert links.votes(rows, None, [[[(Kind.OBSERVATION, 999)]]], Scope(Filters(), NO_WINDOW), 10)[0] == []
    assert links.votes(rows, None, [[]], Scope(Filters(), NO_WINDOW), 10)[0] == []


def test_fusion_counts_a_vote_at_its_evidence_rank_and_share() -> None:
    fused = fuse([Ranked(["a", "b"], 1.0, False), Ranked(["b"], 1.0, True, ranks=[0], shares=[0.25])], k=10)
    scores = {key: s for key, s, _, _ in fused}
    # b: lexical rank 1 (1/12) plus a quarter of a first place (0.25/11); a: 1/11.
    best = 2 / 11
    assert scores["a"] == pytest.approx((1 / 11) / best)
    assert scores["b"] == pytest.approx((1 / 12 + 0.25 / 11) / best)


def test_each_side_gets_its_own_votes_from_one_read(rows: SourceRows) -> None:
    sides = [[[(Kind.OBSERVATION, 1)]], [[(Kind.OBSERVATION, 5)]]]
    lexical, semantic = links.votes(rows, FakeVectorCopy(vectors()), sides, Scope(Filters(), NO_WINDOW), 10)
    assert [v.prompt for v in lexical] == [2] and semantic[0].prompt == 1


def test_a_prompt_not_in_the_copy_yet_leaves_the_others_attributed(rows: SourceRows) -> None:
    partial = vectors()
    del partial[(Kind.PROMPT, 3)]  # say, synced after the search's copy was read
    got = links.votes(rows, FakeVectorCopy(partial), [[[(Kind.OBSERVATION, 5)]]], Scope(Filters(), NO_WINDOW), 10)[0]
    assert got[0].prompt == 1 and got[0].share > 0.9
    del partial[(Kind.PROMPT, 4)]  # its own recorded prompt missing: the prior only
    got = links.votes(rows, FakeVectorCopy(partial), [[[(Kind.OBSERVATION, 5)]]], Scope(Filters(), NO_WINDOW), 10)[0]
    assert [(v.prompt, round(v.share, 6)) for v in got] == [(4, 0.25)]
