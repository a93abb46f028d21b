"""The lists' confidence cutoff (``min_confidence``): what a search leaves out by default, how each
front end says so, and that ``show_all`` (``--all``, ``all=true``) lists everything."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memsync.config.claude_mem.schema import Kind
from memsync.config.settings import Settings
from memsync.search import Mode, Order, Searcher, SearchRequest
from tests.search.test_search import build, o, p, s

DEFAULT = Settings.model_fields["min_confidence"].default
# A small memory: one record answers the question, the rest are about other work.
RECORDS = [
    o("Docker image build took 9 minutes: the build context shipped node_modules; a .dockerignore cut it "
      "to 40 seconds", 3, title="Slow docker build fixed with .dockerignore"),
    p("why is the docker build so slow on CI", 3),
    p("ship the nginx access logs to the central log store", 5),
    p("rotate the log files daily and keep a week", 6),
    o("Log shipping moved from rsyslog to vector; the agent tails /var/log/nginx", 5, title="Log shipping via vector"),
    o("The CSS grid collapsed on narrow screens; minmax() on the sidebar column fixed it", 8,
      title="Sidebar grid fix"),
    s("Set up billing webhooks; stripe signature verification added", 10),
    p("add dark mode to the settings page", 12),
    o("Dark mode toggle stores the choice in localStorage", 12, title="Dark mode toggle"),
    p("what does the retry budget of the http client default to", 14),
]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Searcher]:
    settings = build(tmp_path_factory.mktemp("cutoff"), RECORDS, min_confidence=DEFAULT)
    engine = Searcher(settings)
    yield engine
    engine.close()


def test_what_nothing_answers_is_left_out_and_counted(small: Searcher) -> None:
    """"docker build slow": the two records about it are listed; the rest, found only by meaning
    (once shown at a fused 1.000), fall under the cutoff, are counted, and the total is what passed."""
    resp = small.search(SearchRequest(query="docker build slow", window_days=0))
    assert {r.key for r in resp.results} == {(Kind.OBSERVATION, 1), (Kind.PROMPT, 1)}
    assert all(r.score is not None and r.score >= DEFAULT for r in resp.results)
    assert resp.total == 2 and resp.below_cutoff == len(RECORDS) - 2 and resp.min_confidence == DEFAULT
    assert resp.to_json()["cutoff"] == {"min_confidence": DEFAULT, "below": len(RECORDS) - 2}
    assert resp.below_note("--all") == f"{len(RECORDS) - 2} below the cutoff; --all to show"


def test_show_all_lists_everything_with_its_score(small: Searcher) -> None:
    shown = small.search(SearchRequest(query="docker build slow", window_days=0, show_all=True))
    assert len(shown.results) == len(RECORDS) and shown.below_cutoff == 0 and shown.min_confidence is None
    assert shown.total == len(RECORDS) and shown.below_note("--all") is None
    weak = [r for r in shown.results if r.key not in {(Kind.OBSERVATION, 1), (Kind.PROMPT, 1)}]
    assert all(r.score is not None and r.score < DEFAULT and r.signals.value == "semantic" for r in weak)
    assert all(r.fused is not None and r.fused > 0 for r in shown.results)  # the fused value is kept as a signal


def test_a_question_memory_does_not_answer_lists_little_and_weak(small: Searcher) -> None:
    resp = small.search(SearchRequest(query="kubernetes pod eviction", window_days=0))
    assert len(resp.results) <= 2 and all(r.score is not None and r.score < 0.05 for r in resp.results)
    assert resp.total == len(resp.results) and resp.below_cutoff == len(RECORDS) - len(resp.results)


def test_a_cutoff_of_zero_lists_every_match(tmp_path: Path) -> None:
    engine = Searcher(build(tmp_path, RECORDS[:4], min_confidence=0))
    try:
        resp = engine.search(SearchRequest(query="docker build slow", window_days=0))
    finally:
        engine.close()
    assert len(resp.results) == 4 and resp.below_cutoff == 0 and resp.min_confidence is None


def test_date_order_and_listings_have_no_cutoff_and_no_score(small: Searcher) -> None:
    newest = small.search(SearchRequest(query="docker build slow", window_days=0, order=Order.NEWEST))
    listing = small.search(SearchRequest(query="", window_days=0))
    for resp in (newest, listing):
        assert resp.results and resp.min_confidence is None and resp.below_cutoff == 0
        assert all(r.score is None and r.fused is None for r in resp.results)


def test_no_cutoff_where_the_confidence_is_only_an_order(small: Searcher) -> None:
    """A search by meaning alone (its confidence read without the lexical lists the model was
    fitted with: an order, not a chance) lists every match, each with its score."""
    semantic = small.search(SearchRequest(query="docker build slow", window_days=0, mode=Mode.SEMANTIC))
    assert semantic.min_confidence is None and semantic.below_cutoff == 0 and len(semantic.results) == len(RECORDS)
    assert all(r.score is not None for r in semantic.results)
