"""FTS5 query building: any input is safe, natural-language questions match word by word.

Run through the builders the search uses, on both FTS5 indexes it reads: the app's tables
(``AppFts``: per-table word forms) and memsync's own index for databases without them
(``LexicalIndex``: porter stemming).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsync.config.claude_mem.schema import Era, Kind
from memsync.config.settings import Settings
from memsync.search import fts
from memsync.search.app_fts import AppFts
from memsync.search.lexical import FtsSource
from memsync.search.lexical_index import LexicalIndex
from memsync.search.models import Scope
from memsync.search.sql import SourceRows
from tests.conftest import make_db

HOSTILE = [
    "", " ", '"', '""', "'", "AND", "OR", "NOT", "a AND b OR NOT c", "NEAR(a b, 3)", "*", "a*", "^start",
    "title:secret", "col:", "(", ")", "((a)", "a) OR (b", "\x00", "nul\x00inside", "emoji 🚀🔥 test",
    "日本語のテキスト", "中文 搜索", "x" * 100_000, "-", "+", "{a b}", "a:b:c", "\\", "%", "_", "\u200b",
]
ROWS = [("Connection pool", "the postgres pool timed out under load"),
        ("Memories", "we store memories of sessions"),
        ("CJK", "日本語のテキスト 中文 搜索"),
        ("secret", "title column text")]


def records() -> list[dict[str, Any]]:
    return [{"kind": "observation", "project": "p", "session": "s", "type": "discovery", "title": title,
             "narrative": body, "created_at_epoch": 1_700_000_000_000 + i} for i, (title, body) in enumerate(ROWS)]


@pytest.fixture(scope="module", params=["app-tables", "own-index"])
def source(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FtsSource]:
    tmp = tmp_path_factory.mktemp("fts")
    own = request.param == "own-index"
    s = Settings(db=tmp / "claude-mem.db", data_dir=tmp / "data")
    make_db(s.db, records(), era=Era.LEGACY if own else Era.CURRENT, fts=not own)
    rows = SourceRows.open(s)
    assert rows.has_fts(Kind.OBSERVATION) is not own
    if own:
        yield LexicalIndex.refreshed(s, rows)
    else:
        app = AppFts(rows)
        yield app
        app.close()
    rows.close()


def run(source: FtsSource, text: str) -> list[int]:
    expr = source.expression(Kind.OBSERVATION, text)
    if expr is None:
        return []
    return [i for i, _ in source.ranked(Kind.OBSERVATION, expr, Scope(), 10)]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_input_never_raises(source: FtsSource, text: str) -> None:
    run(source, text)


# Row words, FTS5 syntax and any text, mixed: most generated queries share a word with some row.
QUERY_PARTS = st.one_of(st.sampled_from(["pool", "postgres", "memories", "中文", "secret", "AND", "OR", "NOT",
                                         "NEAR", '"', "*", "(", ")", ":", "^", "-"]), st.text(max_size=30))


@given(st.lists(QUERY_PARTS, max_size=12).map(" ".join))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_text_is_a_valid_expression(source: FtsSource, text: str) -> None:
    # The app's tables raise SourceUnavailable, memsync's index answers nothing, on a syntax error:
    # a valid expression for a text that shares a word with a row finds that row.
    found = run(source, text)
    words = set(fts.tokens(text))
    for i, (title, body) in enumerate(ROWS, start=1):
        if words & set(fts.tokens(f"{title} {body}")):
            assert i in found


def test_multi_word_question_matches_words_not_a_phrase(source: FtsSource) -> None:
    # Upstream's way, the whole query as one phrase, matches nothing here; its words do.
    assert source.ranked(Kind.OBSERVATION, '"postgres connection timeout"', Scope(), 10) == []
    assert run(source, "why did the postgres connection time out?") == [1]


def test_stemming_matches_other_forms(source: FtsSource) -> None:
    assert run(source, "memory") == [2]  # stem "memori": a prefix on the app's tables, a term on the own index


def test_operators_and_column_filters_are_plain_words(source: FtsSource) -> None:
    assert run(source, "title:secret") == [4]  # not a column filter: both words searched everywhere
    assert run(source, "NOT postgres") == [1]


def test_stopwords_alone_still_search() -> None:
    assert fts.tokens("what is it") == ["what", "is", "it"]
    assert fts.tokens("what is the pool") == ["pool"]


def test_cjk_and_emoji(source: FtsSource) -> None:
    assert run(source, "中文") == [3]
    assert source.expression(Kind.OBSERVATION, "🚀") is None


def test_expression_quotes_every_form() -> None:
    assert fts.expression_for([("pool",), ("timed", "time*")]) == '"pool" OR ("timed" OR "time"*)'
    assert fts.expression_for([('a"b',)]) == '"a""b"'
    assert fts.expression_for([]) is None
