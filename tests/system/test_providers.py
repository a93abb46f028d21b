"""The ``openai`` embedding provider against a real OpenAI-compatible server process (the tests'
own, tests/openai_server.py, serving the bundled model): sync and search through it, retries on
429 and 500, a worker degraded (not failing rows) while the endpoint is down, errors that name
their fix, and a switch of provider by ``resync --rebuild`` while searches keep answering."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from memsync.chroma.server import ManagedServer
from memsync.config.formats.worker_status import STALE_MS
from memsync.config.settings import LOCAL_MODEL, Settings
from memsync.search import Searcher, SearchRequest
from memsync.search import vectorstore as vectorstore_module
from memsync.search.models import Mode
from memsync.worker.checks.status import status
from memsync.worker.checks.verify import verify
from memsync.worker.pipeline.resync import resync
from memsync.worker.seed.importer import import_records
from tests.conftest import BASE_MS, mixed_records, obs, prompt
from tests.system.test_e2e import ROOT, memsync
from tests.system.test_worker import WorkerProcess, status_check, wait_for
from tests.upstream.written import written_db

pytestmark = pytest.mark.slow

KEY = "sk-memsync-test-key-4d1f8a"


def remote(settings: Settings, server: Any, **extra: Any) -> Settings:
    """``settings`` with the openai provider at the test server (fields set explicitly, so a
    subprocess gets them as MEMSYNC_* variables)."""
    values = {**settings.model_dump(exclude_unset=True), "embedding_provider": "openai",
              "embedding_base_url": server.url, "embedding_model": server.model, **extra}
    return Settings(**values)


def failed_rows(settings: Settings) -> int:
    with sqlite3.connect(settings.state_path) as conn:
        return int(conn.execute("SELECT count(*) FROM rows WHERE status = 'failed'").fetchone()[0])


@pytest.fixture
def keyed_server() -> Any:
    from tests.openai_server import ServerProcess

    server = ServerProcess(key=KEY).start()
    yield server
    server.stop()


def test_sync_and_search_through_the_endpoint_with_retries_and_no_key_shown(
        settings: Settings, keyed_server: Any) -> None:
    """resync embeds through the endpoint (two 429s with Retry-After retried), a search embeds the
    query there and answers hybrid; the key reaches the server and no output shows it."""
    written_db(settings.db, mixed_records(6))
    s = remote(settings, keyed_server, embedding_api_key=KEY, embedding_batch_size=8)
    keyed_server.faults(status=429, count=2, retry_after="1")
    done = memsync(s, "resync", "--json")
    assert done.returncode == 0, done.stderr
    stats = keyed_server.stats()
    assert stats["faults"] == 2 and stats["embeddings"] >= 3 and stats["unauthorized"] == 0
    found = memsync(s, "search", "Narrative number 3 about caching", "--json", "--window-days", "0")
    assert found.returncode == 0 and '"mode": "hybrid"' in found.stdout, found.stdout + found.stderr
    shown = memsync(s, "settings")
    assert "embedding_api_key" in shown.stdout and "set" in shown.stdout
    for out in (done, found, shown, memsync(s, "settings", "--json"), memsync(s, "status")):
        assert KEY not in out.stdout + out.stderr
    assert verify(s).clean


def test_refusals_and_wrong_dimensions_name_their_fix(settings: Settings, keyed_server: Any) -> None:
    """A bad key (401) and vectors of another length are one-line configuration errors (exit 2)."""
    written_db(settings.db, mixed_records(2))
    bad = memsync(remote(settings, keyed_server, embedding_api_key="sk-wrong"), "resync")
    assert bad.returncode == 2 and "HTTP 401" in bad.stderr and "check the key" in bad.stderr
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    s = remote(settings, keyed_server, embedding_api_key=KEY)
    assert memsync(s, "resync").returncode == 0
    import_records(settings.db, [obs(100)])
    keyed_server.faults(dimension=100)
    # Without embedding_dimension the probe finds 100 against the generation's 384; with it, the
    # answer itself is checked. Either way: exit 2, both lengths named, no row failed.
    for t in (s, remote(settings, keyed_server, embedding_api_key=KEY, embedding_dimension=384)):
        wrong = memsync(t, "resync")
        assert wrong.returncode == 2 and "dimension 100" in wrong.stderr and "384" in wrong.stderr, wrong.stderr
        assert "memsync resync --rebuild" in wrong.stderr
    assert failed_rows(s) == 0


def test_worker_is_degraded_not_failing_rows_while_the_endpoint_is_down(
        settings: Settings, openai_server: Any) -> None:
    """500s and then no server at all: the worker keeps running, says the endpoint is unavailable,
    marks nothing failed; when the server is back the pending rows sync."""
    written_db(settings.db, mixed_records(4))
    s = remote(settings, openai_server, embedding_max_retries=1, embedding_timeout_s=2.0)
    once = memsync(s, "worker", "--once")
    assert once.returncode == 0, once.stderr
    # --once with the endpoint failing: exit 1, one line, nothing failed.
    openai_server.faults(status=500, count=-1)
    import_records(settings.db, [obs(200), obs(201)])
    down = memsync(s, "worker", "--once")
    assert down.returncode == 1 and "unavailable after 2 tries: HTTP 500" in down.stderr, down.stderr
    assert failed_rows(s) == 0 and status(s).pending_rows == 2
    worker = WorkerProcess(s, MEMSYNC_CHROMA_MODE="managed")
    try:
        wait_for(lambda: worker.status().get("degraded") and worker.status().get("embedding_reachable") is False,
                 60, "the worker to report the endpoint unavailable")
        assert "embeddings endpoint" in str(worker.status().get("last_error"))
        openai_server.stop()  # gone altogether: refused connections are the same degraded state
        import_records(settings.db, [obs(202)])
        wait_for(lambda: "cannot connect" in str(worker.status().get("last_error")), 60, "refused connections")
        assert worker.proc.poll() is None and failed_rows(s) == 0
        shown = memsync(s, "status")
        assert "embedding: openai (endpoint unavailable)" in shown.stdout, shown.stdout
        openai_server.start()  # same port; no faults
        worker.wait_caught_up(120)
        wait_for(lambda: not worker.status().get("degraded"), 60, "recovery")
        # the log line comes through the reader thread, which may not have read it yet
        wait_for(lambda: worker.events("sync_recovered"), 30, "the recovered line")
        assert worker.events("sync_degraded")
        assert failed_rows(s) == 0
    finally:
        assert worker.stop() == 0
    assert verify(s.model_copy(update={"chroma_mode": "managed"})).clean


def test_rebuild_to_another_provider_keeps_searches_answering(
        managed: Settings, openai_server: Any, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> None:
    """Built with the bundled model, then configured for the endpoint: during `resync --rebuild`
    searches embed with the active generation's model (hybrid, not lexical), after the switch with
    the new one; a generation whose endpoint is gone falls back lexically with the fix named."""
    written_db(managed.db, mixed_records(8))
    monkeypatch.setattr(vectorstore_module, "GENERATION_TTL_S", 0.0)
    chroma = ManagedServer(managed)  # held by the test (as a worker would): resync adopts, never stops it
    chroma.ensure()
    request.addfinalizer(chroma.stop)
    assert resync(managed).added > 0
    s = remote(managed, openai_server, read_batch_rows=5, batch_size=4)
    searcher = Searcher(s)
    during: list[Any] = []

    def search_now(rows: int, docs: int) -> None:
        if not during:  # once, in the middle of the rebuild (its first batch is written)
            during.append(searcher.search(SearchRequest(query="Narrative number 5 about caching", window_days=0)))
            during.append(searcher.vector.embedder.model_id)

    try:
        served_before = openai_server.stats()["inputs"]
        result = resync(s, rebuild=True, progress=search_now)
        assert result.added > 0 and during, "the rebuild ran and a search happened during it"
        response, model = during
        assert response.mode is Mode.HYBRID, response.reason
        assert model == LOCAL_MODEL  # the old generation's model, not the configured one
        probe = 1  # the writer learns the dimension from one request (embedding_dimension unset)
        assert openai_server.stats()["inputs"] - served_before == result.embedded + probe  # no query went there
        after = searcher.search(SearchRequest(query="Narrative number 5 about caching", window_days=0))
        assert after.mode is Mode.HYBRID, after.reason
        assert searcher.vector.embedder.model_id == "openai:minilm-test"
        assert openai_server.stats()["inputs"] == served_before + result.embedded + probe + 1  # the query, once
        searcher.search(SearchRequest(query="Narrative number 5 about caching", window_days=0))
        assert openai_server.stats()["inputs"] == served_before + result.embedded + probe + 1  # cached
        # Back to the local settings while the active generation is the endpoint's, and it is down.
        openai_server.stop()
        local = Searcher(managed)
        try:
            fallback = local.search(SearchRequest(query="something new entirely", window_days=0))
            assert fallback.mode is Mode.LEXICAL_FALLBACK
            assert "cannot connect" in str(fallback.reason) and "memsync resync --rebuild" in str(fallback.reason)
            assert "embedding_provider=openai" in str(fallback.reason)
        finally:
            local.close()
    finally:
        searcher.close()


def test_a_slow_endpoint_costs_a_search_its_deadline_only(settings: Settings, openai_server: Any,
                                                          tmp_path: Path) -> None:
    """An endpoint slower than the search deadline: the answer is lexical, within about the deadline."""
    written_db(settings.db, mixed_records(3) + [obs(9, created_at_epoch=BASE_MS)])
    s = remote(settings, openai_server, search_timeout_ms=400)
    assert memsync(s, "resync").returncode == 0
    openai_server.faults(delay_s=3, count=-1)
    searcher = Searcher(s)
    try:
        response = searcher.search(SearchRequest(query="caching narrative", window_days=0))
        assert response.mode is Mode.LEXICAL_FALLBACK and "no answer within 0.4 s" in str(response.reason)
        assert response.results and response.timings_ms["total"] < 2500
    finally:
        searcher.close()


def test_reranker_reorders_the_fused_top_and_falls_back_on_failure(settings: Settings, openai_server: Any) -> None:
    """rerank_provider=openai: the fused top-N go to /v1/rerank and come back in its order; a
    failing reranker keeps the fused order and says so in the reason."""
    written_db(settings.db, mixed_records(10))
    resync(settings)  # the bundled model: the reranker is independent of the embedding provider
    query = "Narrative number 7 about caching"
    plain = Searcher(settings)  # embedded Chroma is single-process: one searcher at a time
    try:
        fused = plain.search(SearchRequest(query=query, window_days=0))
    finally:
        plain.close()
    ranked = Searcher(settings.model_copy(update={"rerank_provider": "openai", "rerank_base_url": openai_server.url,
                                                  "rerank_model": openai_server.model, "rerank_top_n": 10}))
    try:
        reranked = ranked.search(SearchRequest(query=query, window_days=0))
        assert openai_server.stats()["rerank"] == 1 and reranked.reason is None, reranked.reason
        assert reranked.mode is Mode.HYBRID and len(reranked.results) == len(fused.results)
        top = [r.key for r in reranked.results[:10]]
        assert sorted(top) == sorted(r.key for r in fused.results[:10])  # the same candidates, reordered
        assert top != [r.key for r in fused.results[:10]]
        # Each row keeps its own confidence (the relevance model's, read before the reranker).
        assert {r.key: r.score for r in reranked.results} == {r.key: r.score for r in fused.results}
        openai_server.faults(status=500, count=-1)
        kept = ranked.search(SearchRequest(query=query, window_days=0))
        assert [r.key for r in kept.results] == [r.key for r in fused.results]
        assert kept.mode is Mode.HYBRID and "reranker skipped, fused order kept" in str(kept.reason)
    finally:
        ranked.close()


def test_a_process_that_searched_through_endpoints_leaves_no_connection_at_exit(openai_server: Any,
                                                                               tmp_path: Path) -> None:
    """The query embedder and the reranker are kept for the process, each with a keep-alive
    connection: a process that used them (a search server, a command) closes them as it exits,
    where the interpreter's teardown found them open ("unclosed socket")."""
    code = (
        "import sys; from memsync.config.settings import Settings\n"
        "from memsync.embedding import configured_identity, generation_embedder, make_reranker\n"
        "s = Settings(db=sys.argv[1], data_dir=sys.argv[2], embedding_provider='openai',"
        " embedding_base_url=sys.argv[3], embedding_model=sys.argv[4], rerank_provider='openai',"
        " rerank_model=sys.argv[4])\n"
        "generation_embedder(s, configured_identity(s)).embed(['a query'])\n"
        "print(make_reranker(s).rerank('a query', ['one', 'two']))\n"
    )
    done = subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-c", code, str(tmp_path / "c.db"),
                           str(tmp_path / "data"), openai_server.url, openai_server.model],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.startswith("[("), done.stderr[-2000:]
    assert openai_server.stats()["rerank"] == 1
    assert "ResourceWarning" not in done.stderr, done.stderr[-2000:]


def test_a_slow_endpoint_keeps_the_worker_healthy_and_a_stopped_worker_is_called_down(
        managed: Settings, openai_server: Any) -> None:
    """An endpoint taking 45 s a batch: `status --check`, polled every 5 s as a service manager
    would, says healthy for the whole first pass (the heartbeat is refreshed while the batch is in
    flight, for as long as the call can take); a worker stopped with SIGSTOP is called down within
    twice the staleness limit. One document: the first pass is one 45 s request."""
    written_db(managed.db, [prompt(1)])  # one document: one request
    s = remote(managed, openai_server, embedding_timeout_s=60.0, embedding_max_retries=0, embedding_dimension=384)
    openai_server.faults(delay_s=45, count=-1)
    worker = WorkerProcess(s)
    try:
        wait_for(lambda: worker.status().get("pid") == worker.proc.pid, 60, "the worker to say it started")
        polls: list[tuple[float, int, dict[str, Any]]] = []
        started = time.monotonic()
        while worker.status().get("reconciles", 0) < 1:
            assert time.monotonic() - started < 150, "the first pass did not end"
            at = time.monotonic() - started
            code, report = status_check(s)
            polls.append((at, code, report))
            assert code == 0, (polls[-1], worker.lines[-5:])
            time.sleep(max(0.0, 5.0 - (time.monotonic() - started - at)))  # a poll every 5 s
        assert openai_server.stats()["faults"] == 1  # the one batch, and it really was slow
        waited = [r["worker"]["waiting_on"] for _, _, r in polls if r["worker"].get("waiting_on")]
        # what the status says it waits on while the batch is in flight (a slow start may first show
        # Chroma connecting)
        on_endpoint = [w for w in waited if "embeddings endpoint" in w["what"]]
        assert on_endpoint and on_endpoint[0]["up_to_s"] == 60.0, polls
        assert polls[-1][0] >= 45 * 0.8, "the polls covered the slow batch"
        worker.proc.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        limit_s = STALE_MS / 1000
        while True:
            code, report = status_check(s)
            if code == 1:
                break
            assert time.monotonic() - stopped < 2 * limit_s, "a stopped worker still reads as healthy"
            time.sleep(5.0)
        assert time.monotonic() - stopped < 2 * limit_s
        assert [p for p in report["problems"] if p.startswith("worker down (heartbeat is stale: ") and
                f"the limit is {STALE_MS // 1000} s" in p], report
    finally:
        worker.proc.send_signal(signal.SIGCONT)
        worker.kill()
