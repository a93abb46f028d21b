"""Chinese, Japanese and Korean words found by the lexical side: CJK runs cut into characters and
bigrams in both of memsync's lexical indexes (``config.cjk``), queries cut the same way, and a CJK
query answered by memsync's indexes, never by the app's unicode61 tables, with the reason naming
the index. Real claude-mem files of both column eras; no Chroma (the lexical side alone)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memsync.config import cjk
from memsync.config.claude_mem.schema import Era
from memsync.config.settings import Settings
from memsync.search import Mode, Searcher, SearchRequest, fts
from memsync.search.lexical_index import FORMAT, INDEX_FILE
from memsync.worker.textsync import TextSync
from tests.conftest import make_db, obs, prompt, summary

ZH = "修复退款金额的舍入错误"  # fixed the rounding error in refund amounts
JA = "ログイン画面にパスワードリセットを追加"  # added a password reset to the login screen
KO = "로그인 화면에 비밀번호를 재설정하는 기능 추가"  # added password reset to the login screen


def _settings(tmp_path: Path) -> Settings:
    return Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="http",
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
    """Every word of the issue's example, one-character words included, is found by the lexical
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
