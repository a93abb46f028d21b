"""FTS5 query building: any input is safe, natural-language questions match word by word."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.search import fts

HOSTILE = [
    "", " ", '"', '""', "'", "AND", "OR", "NOT", "a AND b OR NOT c", "NEAR(a b, 3)", "*", "a*", "^start",
    "title:secret", "col:", "(", ")", "((a)", "a) OR (b", "\x00", "nul\x00inside", "emoji 🚀🔥 test",
    "日本語のテキスト", "中文 搜索", "x" * 100_000, "-", "+", "{a b}", "a:b:c", "\\", "%", "_", "\u200b",
]


@pytest.fixture(scope="module")
def table() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(title, body)")
    conn.executemany("INSERT INTO f VALUES (?, ?)", [
        ("Connection pool", "the postgres pool timed out under load"),
        ("Memories", "we store memories of sessions"),
        ("CJK", "日本語のテキスト 中文 搜索"),
        ("secret", "title column text"),
    ])
    return conn


def run(conn: sqlite3.Connection, text: str) -> list[int]:
    expr = fts.match_expression(text)
    if expr is None:
        return []
    return [r[0] for r in conn.execute("SELECT rowid FROM f WHERE f MATCH ? ORDER BY rank", (expr,))]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_input_never_raises(table: sqlite3.Connection, text: str) -> None:
    run(table, text)


@given(st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_any_text_is_a_valid_expression(text: str) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(body)")
    conn.execute("INSERT INTO f VALUES ('some text')")
    run(conn, text)  # raises sqlite3.OperationalError on a syntax error


def test_multi_word_question_matches_words_not_a_phrase(table: sqlite3.Connection) -> None:
    # Upstream defect 7: the whole query as one phrase matches nothing here.
    assert run(table, "why did the postgres connection time out?") == [1]
    phrase = fts.phrase_expression("postgres connection timeout")
    assert phrase is not None
    assert not table.execute("SELECT rowid FROM f WHERE f MATCH ?", (phrase,)).fetchall()


def test_stemming_by_prefix_matches_other_forms(table: sqlite3.Connection) -> None:
    assert run(table, "memory") == [2]  # "memory" → stem "memori" → prefix matches "memories"


def test_operators_and_column_filters_are_plain_words(table: sqlite3.Connection) -> None:
    assert run(table, "title:secret") == [4]  # not a column filter: both words searched everywhere
    assert run(table, "NOT postgres") == [1]


def test_stopwords_alone_still_search() -> None:
    assert fts.tokens("what is it") == ["what", "is", "it"]
    assert fts.tokens("what is the pool") == ["pool"]


def test_cjk_and_emoji(table: sqlite3.Connection) -> None:
    assert run(table, "中文") == [3]
    assert fts.match_expression("🚀") is None
