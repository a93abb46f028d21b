"""The relevance model (search.relevance): each signal's effect on a small constructed search, the
confidence a person reads, the shipped weights being what the fit makes of the committed dump, and
the search returning its results in the model's order with their confidence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memsync.config.claude_mem.schema import Era, Kind
from memsync.search import Mode, Searcher, SearchRequest, relevance
from memsync.search.hydrate import PageEntry
from memsync.search.models import Key
from memsync.search.relevance import fit, model
from memsync.search.relevance.features import FEATURES, INGREDIENTS, matrix
from memsync.search.sql import SourceRows
from tests.conftest import make_db, obs, prompt
from tests.search.test_search import build, o, p

DUMPS = Path(__file__).resolve().parents[1] / "data" / "relevance"
LOCAL = relevance.load("local")


def search_of(cands: list[dict[str, Any]]) -> tuple[list[Key], np.ndarray]:
    """A constructed search: each candidate names its ranks (lexical, semantic), cosine, session,
    number and length; the keys in fused order (as given) and their ingredients."""
    keys: list[Key] = [(Kind.PROMPT, n + 1) for n in range(len(cands))]
    lists: dict[str, dict[Key, int]] = {"lexical": {}, "semantic": {}, "context": {}}
    for key, c in zip(keys, cands, strict=True):
        for name in ("lexical", "semantic"):
            if c.get(name) is not None:
                lists[name][key] = c[name]
    sims = {k: c["sim"] for k, c in zip(keys, cands, strict=True)}
    where = {k: (c["session"], c["number"], c.get("length", 120)) for k, c in zip(keys, cands, strict=True)}
    return keys, relevance.ingredients(keys, lists, {}, sims, 0.2, where)


def fused_order(keys: list[Key], ing: np.ndarray) -> list[int]:
    """The ids in the fusion's own order (its weighted RRF sum, as the search fuses)."""
    fused = matrix(ing)[:, FEATURES.index("fused")]
    return [keys[i][1] for i in np.argsort(-fused, kind="stable")]


def order_of(keys: list[Key], ing: np.ndarray) -> list[int]:
    """The ids in the model's order, starting from the fused order."""
    fused = matrix(ing)[:, FEATURES.index("fused")]
    at = np.argsort(-fused, kind="stable")
    entries = [PageEntry(keys[i], float(fused[i]), True, True) for i in at]
    return [e.key[1] for e in relevance.rank(entries, ing[at], LOCAL)]


def halves(second_session: int) -> list[dict[str, Any]]:
    """The question's first half first in both lists (prompt 1, session 1, number 5); four
    distractors from four other sessions, high in the lexical list; the second half (prompt 6) second
    in the dense list and sixth in the lexical one, in ``second_session`` at number 6."""
    cands = [{"lexical": 0, "semantic": 0, "sim": 0.62, "session": 1, "number": 5}]
    cands += [{"lexical": r, "semantic": r + 3, "sim": 0.45, "session": 10 + r, "number": 3} for r in range(1, 5)]
    cands.append({"lexical": 5, "semantic": 1, "sim": 0.5, "session": second_session, "number": 6})
    return cands


class TestSignals:
    def test_two_turns_that_each_answer_half_both_reach_the_top_3(self) -> None:
        keys, ing = search_of(halves(second_session=1))
        assert fused_order(keys, ing).index(6) == 3  # fusion alone: fourth, below two distractors
        got = order_of(keys, ing)
        assert got[0] == 1 and got.index(6) < 3  # the neighbour of the best match moves past them

    def test_the_same_turn_in_another_session_stays_where_fusion_put_it(self) -> None:
        keys, ing = search_of(halves(second_session=99))
        assert order_of(keys, ing).index(6) == 3

    def test_a_one_word_turn_ranks_below_an_equal_one_that_says_something(self) -> None:
        cands = [{"lexical": 0, "semantic": 0, "sim": 0.6, "session": s, "number": 1, "length": n}
                 for s, n in ((1, 6), (2, 160))]
        keys, ing = search_of(cands)
        conf = LOCAL.probability(matrix(ing))
        assert order_of(keys, ing) == [2, 1] and conf[1] > conf[0]


    def test_a_turn_whose_session_the_query_also_found_elsewhere_gains(self) -> None:
        # Prompts 4 and 5 match too, far from prompt 3 (not its neighbours): in prompt 3's session or
        # in another one. Evidence spread over a session is the multi-hop case.
        def confidence_of_3(session_of_4_and_5: int) -> float:
            cands = [{"lexical": 0, "semantic": 0, "sim": 0.6, "session": 9, "number": 1},
                     {"lexical": 1, "semantic": 2, "sim": 0.5, "session": 1, "number": 10},
                     {"lexical": 2, "semantic": 1, "sim": 0.5, "session": 2, "number": 10},
                     {"lexical": 3, "semantic": 3, "sim": 0.45, "session": session_of_4_and_5, "number": 20},
                     {"lexical": 4, "semantic": 4, "sim": 0.45, "session": session_of_4_and_5, "number": 30}]
            return float(LOCAL.probability(matrix(search_of(cands)[1]))[2])

        assert confidence_of_3(2) > 1.2 * confidence_of_3(7)


class TestConfidence:
    def test_a_row_found_only_by_meaning_and_far_from_the_query_is_not_confident(self) -> None:
        # The old fused score gave such a row 1.000 (one list, first place).
        keys, ing = search_of([{"lexical": None, "semantic": 0, "sim": 0.22, "session": 1, "number": 1}])
        assert LOCAL.probability(matrix(ing))[0] < 0.2

    def test_a_row_both_sides_put_first_close_to_the_query_is(self) -> None:
        cands = [{"lexical": 0, "semantic": 0, "sim": 0.75, "session": 1, "number": 1}]
        cands += [{"lexical": r, "semantic": r, "sim": 0.3, "session": 10 + r, "number": 1} for r in range(1, 10)]
        keys, ing = search_of(cands)
        conf = LOCAL.probability(matrix(ing))
        assert conf[0] > 0.3 and conf[0] == conf.max()

    def test_an_empty_search_ranks_nothing(self) -> None:
        assert relevance.rank([], np.zeros((0, len(INGREDIENTS))), LOCAL) == []


@pytest.mark.slow  # refits each shipped model: about 10 s each
class TestModelFiles:
    @pytest.mark.parametrize(("name", "dump"), [("local", "local"), ("lexical", "local"),
                                                ("local-multilingual", "local-multilingual")])
    def test_the_shipped_model_is_what_the_fit_makes_of_the_committed_dump(self, name: str, dump: str) -> None:
        fresh = fit.fit_dump(DUMPS / f"{dump}.npz", name)
        shipped = model.Model.from_json(json.loads(model.path_for(name).read_text(encoding="utf-8")))
        assert shipped.features == fresh.features
        for part in ("mean", "scale", "weights"):
            assert np.allclose(getattr(shipped, part), getattr(fresh, part), atol=1e-4), part
        assert shipped.intercept == pytest.approx(fresh.intercept, abs=1e-4)

    @pytest.mark.parametrize("dump", ["local", "local-multilingual"])
    def test_the_dump_holds_no_text(self, dump: str) -> None:
        with np.load(DUMPS / f"{dump}.npz") as d:
            assert {k: d[k].dtype.kind for k in d.files} == {
                "ingredients": "f", "label": "i", "search": "i", "group": "i", "setting": "i", "category": "i",
                "evidence": "i"}

    def test_a_provider_without_its_own_model_reads_the_local_one(self) -> None:
        assert model.load("openai") == model.load("local")

    @pytest.mark.parametrize(("change", "message"), [({"format": 2}, "format"), ({"features": ["nope"]}, "unknown")])
    def test_a_model_file_of_another_format_or_with_unknown_features_is_refused(
            self, change: dict[str, Any], message: str) -> None:
        data = {**model.load("local").to_json(), **change}
        with pytest.raises(ValueError, match=message):
            model.Model.from_json(data)


@pytest.mark.parametrize("era", [Era.CURRENT, Era.LEGACY], ids=["current", "legacy"])
def test_positions_say_where_in_its_session_each_row_was_recorded(tmp_path: Path, era: Era) -> None:
    records = [prompt(1, session="a", prompt_number=3, prompt_text="x" * 40), prompt(2, session="b", prompt_number=1),
               obs(1, session="a", prompt_number=3), prompt(3, session="a", prompt_number=None)]
    rows = SourceRows(make_db(tmp_path / "claude-mem.db", records, era=era))
    try:
        got = rows.positions([(Kind.PROMPT, 1), (Kind.PROMPT, 2), (Kind.OBSERVATION, 1), (Kind.PROMPT, 9)])
    finally:
        rows.close()
    assert got[(Kind.PROMPT, 1)][1:] == (3, 40) and got[(Kind.PROMPT, 2)][1] == 1
    assert got[(Kind.OBSERVATION, 1)][:2] == got[(Kind.PROMPT, 1)][:2]  # recorded under prompt 1
    assert got[(Kind.PROMPT, 1)][0] != got[(Kind.PROMPT, 2)][0]
    assert (Kind.PROMPT, 9) not in got  # no such row


def test_the_search_answers_in_the_models_order_with_each_confidence(tmp_path: Path) -> None:
    records = [p("the deploy failed because the registry token expired", 2, number=4),
               p("so we rotated the token and pinned the registry mirror", 2, number=5),
               p("lunch plans for friday", 3, number=1),
               o("Registry token expiry broke the deploy pipeline", 2, prompt_number=4)]
    settings = build(tmp_path, records)
    engine = Searcher(settings)
    try:
        resp = engine.search(SearchRequest(query="why did the deploy fail registry token", window_days=0,
                                           kinds=[Kind.PROMPT]))
        assert resp.mode is Mode.HYBRID and "relevance" in resp.timings_ms
        conf = [r.confidence for r in resp.results]
        assert all(c is not None and 0 <= c <= 1 for c in conf)
        assert conf == sorted(conf, reverse=True)  # type: ignore[type-var]
        assert [r.score for r in resp.results] == sorted((r.score for r in resp.results), reverse=True)
        out = resp.results[0].to_json()
        assert out["score"] == round(conf[0], 4) and "confidence" not in out  # type: ignore[arg-type]
        assert out["signals"]["fused"] == round(resp.results[0].fused, 4)  # type: ignore[arg-type]
    finally:
        engine.close()


def test_a_search_over_every_kind_keeps_the_fused_order_and_gains_confidences(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    records = [p("the deploy failed because the registry token expired", 2, number=4),
               p("so we rotated the token and pinned the registry mirror", 2, number=5),
               o("Registry token expiry broke the deploy pipeline", 2, prompt_number=4)]
    settings = build(tmp_path, records)
    engine = Searcher(settings)
    req = SearchRequest(query="why did the deploy fail registry token", window_days=0, show_all=True)
    try:
        got = engine.search(req)
        monkeypatch.setattr(relevance, "rank", lambda entries, ing, model, reorder=True: list(entries))
        fused = engine.search(req)
    finally:
        engine.close()
    assert [r.key for r in got.results] == [r.key for r in fused.results]
    assert all(r.confidence is not None for r in got.results) and all(r.confidence is None for r in fused.results)


def test_the_lexical_fallback_reads_the_lexical_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = build(tmp_path, [p("the deploy failed because the registry token expired", 2)])
    loaded: list[str] = []
    real = relevance.load
    monkeypatch.setattr(relevance, "load", lambda name: loaded.append(name) or real(name))
    engine = Searcher(settings)
    try:
        resp = engine.search(SearchRequest(query="registry token", window_days=0, mode=Mode.LEXICAL))
    finally:
        engine.close()
    assert loaded == [relevance.LEXICAL] and resp.results and resp.results[0].confidence is not None



def test_a_relevance_stage_that_fails_leaves_the_fused_order_and_says_so(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    settings = build(tmp_path, [p("the deploy failed because the registry token expired", 2, number=4),
                                p("so we rotated the token", 2, number=5)])
    engine = Searcher(settings)
    req = SearchRequest(query="registry token deploy", window_days=0, kinds=[Kind.PROMPT])

    def broken(name: str) -> relevance.Model:
        raise OSError("model file unreadable")

    try:
        monkeypatch.setattr(relevance, "load", broken)
        resp = engine.search(req)
    finally:
        engine.close()
    assert resp.results and all(r.confidence is None for r in resp.results)
    assert resp.reason and "relevance model skipped" in resp.reason


def test_a_search_by_meaning_alone_keeps_the_dense_order(tmp_path: Path) -> None:
    settings = build(tmp_path, [p("the deploy failed because the registry token expired", 2, number=4),
                                p("so we rotated the token", 2, number=5), p("ok", 2, number=6)])
    engine = Searcher(settings)
    try:
        resp = engine.search(SearchRequest(query="registry token deploy", window_days=0, kinds=[Kind.PROMPT],
                                           mode=Mode.SEMANTIC))
    finally:
        engine.close()
    sims = [r.similarity for r in resp.results]
    assert sims == sorted(sims, reverse=True) and all(r.confidence is not None for r in resp.results)  # type: ignore[type-var]
