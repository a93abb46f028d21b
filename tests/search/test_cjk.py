"""Chinese, Japanese and Korean words found by the lexical side: CJK runs cut into characters and
bigrams in both of memsync's lexical indexes (``config.cjk``), queries cut the same way, and a CJK
query answered by memsync's indexes, never by the app's unicode61 tables, with the reason naming
the index. Real claude-mem files of both column eras; no Chroma (the lexical side alone)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memsync.config import cjk
from memsync.config.claude_mem.schema import Era, Kind
from memsync.config.settings import Settings
from memsync.search import Filters, Mode, Order, Searcher, SearchRequest, fts
from memsync.search.lexical_index import FORMAT, INDEX_FILE
from memsync.worker.rows.state import now_ms
from memsync.worker.seed.importer import import_records
from memsync.worker.stores.textsync import TextSync
from tests.conftest import make_db, obs, prompt, summary

ZH = "修复退款金额的舍入错误"  # fixed the rounding error in refund amounts
JA = "ログイン画面にパスワードリセットを追加"  # added a password reset to the login screen
KO = "로그인 화면에 비밀번호를 재설정하는 기능 추가"  # added password reset to the login screen


def _settings(tmp_path: Path) -> Settings:
    return Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="http", min_confidence=0,
                    chroma_port=9)  # nothing listens: searches answer lexically


def _records() -> list[dict[str, object]]:
    return [obs(1, title=ZH, narrative="在 `refund.py` 的 `round_amount()` 里少了一分钱", subtitle="billing"),
            obs(2, title=JA, narrative="`auth/reset.ts` を追加した", subtitle="auth"),
            obs(3, title="Fix the cache key collision", narrative="Keys of two tenants collided."),
            summary(4, request=KO, learned="토큰은 15분 후 만료된다"),
            prompt(5, prompt_text="请把退款的金额四舍五入到分")]


def _index(settings: Settings) -> None:
    text = TextSync(settings)
    try:
        assert text.step(force_full=True) is not None
    finally:
        text.close()


def test_cutting_rules() -> None:
    assert cjk.index_form("plain English text") == "plain English text"  # untouched without CJK
    assert cjk.index_form("修复bug退款").split() == ["修", "复", "修复", "bug", "退", "款", "退款"]
    assert cjk.query_words("退款bug") == ["退款", "bug"]
    assert cjk.query_words("钱") == ["钱"]
    assert cjk.query_words("舍入错误") == ["舍入", "入错", "错误"]
    assert fts.tokens("為什麼 refunds 少了一分钱?") == ["為什", "什麼", "refunds", "少了", "了一", "一分", "分钱"]
    assert not cjk.has_cjk("café naïve Ünïcode") and cjk.has_cjk("ハ") and cjk.has_cjk("한") and cjk.has_cjk("々")


QUERIES = [("退款", {("observation", 1), ("prompt", 1)}), ("舍入错误", {("observation", 1)}),
           ("金额", {("observation", 1), ("prompt", 1)}), ("钱", {("observation", 1)}),
           ("パスワード", {("observation", 2)}), ("リセット", {("observation", 2)}),
           ("비밀번호", {("summary", 1)}), ("만료", {("summary", 1)})]


@pytest.mark.parametrize("era", [Era.CURRENT, Era.LEGACY])
@pytest.mark.parametrize("index", ["text index", "own FTS index"])
def test_cjk_words_found_inside_runs(tmp_path: Path, era: Era, index: str) -> None:
    """Every word of the example above, one-character words included, is found by the lexical
    side, whichever of memsync's indexes answers, and the reason names it; an English query still
    goes to the app's tables and says nothing about CJK."""
    s = _settings(tmp_path)
    make_db(s.db, _records(), era=era)
    if index == "text index":
        _index(s)
    searcher = Searcher(s)
    try:
        for query, want in QUERIES:
            resp = searcher.search(SearchRequest(query=query, mode=Mode.LEXICAL, window_days=0))
            got = {(r.kind.value, r.id) for r in resp.results}
            assert want <= got, (query, got)
            assert "CJK words as bigrams" in (resp.reason or "") and f"memsync's {index}" in (resp.reason or "")
            assert "own FTS index" in (resp.reason or "") or index == "text index"
        english = searcher.search(SearchRequest(query="cache collision", mode=Mode.LEXICAL, window_days=0))
        assert [(r.kind.value, r.id) for r in english.results] == [("observation", 3)]
        assert "CJK" not in (english.reason or "")
    finally:
        searcher.close()


def test_app_tables_alone_miss_cjk_words(tmp_path: Path) -> None:
    """Why the routing exists: the app's own FTS5 table (unicode61) does not find 退款 inside a run."""
    s = _settings(tmp_path)
    make_db(s.db, _records())
    with sqlite3.connect(s.db) as conn:
        assert conn.execute("SELECT count(*) FROM observations_fts WHERE observations_fts MATCH '\"退款\"'"
                            ).fetchone() == (0,)


def test_own_index_of_an_older_format_is_rebuilt_once(tmp_path: Path) -> None:
    """An own FTS index written before CJK cutting (no format number) is rebuilt on first use, and
    then answers CJK words."""
    s = _settings(tmp_path)
    make_db(s.db, _records(), fts=False)
    s.data_dir.mkdir(parents=True)
    with sqlite3.connect(s.data_dir / INDEX_FILE) as conn:  # format 1: the run as one word, fingerprint current
        conn.execute("CREATE TABLE fingerprint (kind TEXT PRIMARY KEY, n INTEGER, max_id INTEGER, chars INTEGER)")
        conn.execute("CREATE VIRTUAL TABLE idx_observations USING fts5(title, tokenize='porter unicode61')")
        conn.execute("INSERT INTO idx_observations(rowid, title) VALUES (1, ?)", (ZH,))
    conn.close()
    searcher = Searcher(s)
    try:
        resp = searcher.search(SearchRequest(query="退款", mode=Mode.LEXICAL, window_days=0))
    finally:
        searcher.close()
    assert ("observation", 1) in {(r.kind.value, r.id) for r in resp.results}
    with sqlite3.connect(s.data_dir / INDEX_FILE) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (FORMAT,)
    conn.close()


def test_a_text_index_of_the_previous_version_is_rebuilt_with_cjk_cut(tmp_path: Path) -> None:
    """An index written by version 3 (CJK runs as one word) is rebuilt whole by the next refresh,
    after which the word inside the run is found by the text index itself."""
    import json

    from memsync.config.formats.text_index import META_FILE, VERSION, index_path
    from memsync.search.models import Scope, Window
    from memsync.search.textindex import TextIndex

    s = _settings(tmp_path)
    make_db(s.db, _records())
    _index(s)
    meta_file = index_path(s) / META_FILE
    meta = json.loads(meta_file.read_text())
    meta_file.write_text(json.dumps({**meta, "version": VERSION - 1}))
    text = TextSync(s)
    try:
        result = text.step(force_full=False)
    finally:
        text.close()
    assert result is not None and set(result.rebuilt) == {"observation", "summary", "prompt"}
    assert json.loads(meta_file.read_text())["version"] == VERSION
    index = TextIndex.open(s)
    assert index is not None
    everything = Scope(Filters(), Window(0, None, None, "all_time"))
    assert [i for i, _ in index.search(Kind.OBSERVATION, "退款", everything, 10)] == [1]


def test_cjk_words_in_the_tail_date_order_and_outside_the_window(tmp_path: Path) -> None:
    """Where FTS5 answers beside the text index (rows committed since its last refresh, the newest
    first, the count before the window), a CJK query is answered by memsync's own FTS index, never
    the app's tables, and the reason names both indexes."""
    s = _settings(tmp_path)
    make_db(s.db, _records())
    _index(s)
    import_records(s.db, [obs(50, title="退款接口超时", narrative="新的一行", created_at_epoch=now_ms())])
    searcher = Searcher(s)
    try:
        tail = searcher.search(SearchRequest(query="退款", mode=Mode.LEXICAL, window_days=0))
        assert {("observation", 1), ("observation", 4), ("prompt", 1)} <= {(r.kind.value, r.id) for r in tail.results}
        assert "memsync's text index for observations" in (tail.reason or "")
        assert "memsync's own FTS index for observations" in (tail.reason or "")
        newest = searcher.search(SearchRequest(query="退款", mode=Mode.LEXICAL, window_days=0, order=Order.NEWEST))
        assert [(r.kind.value, r.id) for r in newest.results][0] == ("observation", 4)
        windowed = searcher.search(SearchRequest(query="退款", mode=Mode.LEXICAL, window_days=30))
        assert [(r.kind.value, r.id) for r in windowed.results] == [("observation", 4)]
        assert windowed.excluded_by_window == 2  # observation 1 and prompt 1, from 2026-05, before the window
    finally:
        searcher.close()
