"""How fast a search falls back to its lexical answer when Chroma cannot answer: at once when no
managed server is recorded or its port refuses connections; after ``search_timeout_ms`` when a
server accepts connections but does not answer (not Chroma's own 30 s call timeout, not the
5 s heartbeat of a connect). The embedder is a fake, loaded already: what is timed is the fallback.
"""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memsync.chroma.server import ServerInfo
from memsync.config.settings import Settings
from memsync.search import Mode, Searcher, SearchRequest
from memsync.search.vectorstore import VectorStore, VectorUnavailable, probe
from tests.conftest import FakeEmbedder, fake_chroma_run, free_port, make_db, mixed_records

FAST_S = 0.1  # "at once": well under any deadline (the searches themselves take a few ms)
DEADLINE_MS = 400


@pytest.fixture
def managed(tmp_path: Path) -> Settings:
    """Managed mode, a small database and no server (search_timeout_ms far above FAST_S)."""
    s = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="managed",
                 search_timeout_ms=5000, text_index=False, vector_copy=False)
    make_db(s.db, mixed_records(12))
    s.data_dir.mkdir(parents=True)
    return s


@pytest.fixture
def record(tmp_path: Path) -> Iterator[Callable[[Settings, int], None]]:
    """Record a managed server on ``port`` as the worker would: its pid a live process whose
    command line is a `chroma run` on the store (the check a record must pass)."""
    with contextlib.ExitStack() as stack:

        def write(s: Settings, port: int) -> None:
            proc = stack.enter_context(fake_chroma_run(s.chroma_dir, port))
            ServerInfo(proc.pid, "127.0.0.1", port, str(s.chroma_dir), owner=os.getpid()).write(s.data_dir)

        yield write


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield int(sock.getsockname()[1])


def timed_search(s: Settings, query: str = "caching") -> tuple[float, Mode, str]:
    engine = Searcher(s, embedder=FakeEmbedder())
    try:
        # A full garbage collection (~100-200 ms on a loaded machine) lands wherever allocation
        # counts say: where a test file's imports shift it, in the timed search. Not what is timed.
        gc.collect()
        t = time.perf_counter()
        resp = engine.search(SearchRequest(query=query, window_days=0))
        elapsed = time.perf_counter() - t
        assert resp.results, "the lexical side still answers"
        return elapsed, resp.mode, resp.reason or ""
    finally:
        engine.close()


def test_no_recorded_server_falls_back_at_once(managed: Settings) -> None:
    elapsed, mode, reason = timed_search(managed)
    assert mode is Mode.LEXICAL_FALLBACK and "no managed Chroma server running" in reason
    assert elapsed < FAST_S, f"{elapsed * 1000:.0f} ms"


def test_refused_port_falls_back_at_once(managed: Settings, record: Callable[[Settings, int], None]) -> None:
    port = free_port()  # nothing listens there: a real refused connection
    record(managed, port)
    elapsed, mode, reason = timed_search(managed)
    assert mode is Mode.LEXICAL_FALLBACK and f"127.0.0.1:{port}: connection refused" in reason
    assert elapsed < FAST_S, f"{elapsed * 1000:.0f} ms"


def test_refused_http_server_falls_back_at_once(managed: Settings) -> None:
    port = free_port()
    s = managed.model_copy(update={"chroma_mode": "http", "chroma_port": port})
    elapsed, mode, reason = timed_search(s)
    assert mode is Mode.LEXICAL_FALLBACK and "connection refused" in reason
    assert elapsed < FAST_S, f"{elapsed * 1000:.0f} ms"


def test_a_silent_server_gets_the_search_deadline(managed: Settings, silent_port: int,
                                                   record: Callable[[Settings, int], None]) -> None:
    s = managed.model_copy(update={"search_timeout_ms": DEADLINE_MS})
    record(s, silent_port)
    elapsed, mode, reason = timed_search(s)
    assert mode is Mode.LEXICAL_FALLBACK and f"no answer within {DEADLINE_MS / 1000:g} s" in reason
    assert DEADLINE_MS / 1000 * 0.9 <= elapsed < DEADLINE_MS / 1000 + 1.0, f"{elapsed * 1000:.0f} ms"


def test_probe_needs_no_model_and_says_why(managed: Settings, silent_port: int,
                                           record: Callable[[Settings, int], None]) -> None:
    """What a caller can check before loading the embedding model."""
    gc.collect()  # as in timed_search
    t = time.perf_counter()
    with pytest.raises(VectorUnavailable, match="no managed Chroma server running"):
        probe(managed)
    record(managed, free_port())
    with pytest.raises(VectorUnavailable, match="connection refused"):
        probe(managed)
    assert time.perf_counter() - t < FAST_S
    s = managed.model_copy(update={"search_timeout_ms": DEADLINE_MS})
    record(s, silent_port)
    t = time.perf_counter()
    with pytest.raises(VectorUnavailable, match="no answer within"):
        probe(s)
    assert time.perf_counter() - t >= DEADLINE_MS / 1000 * 0.9
    probe(managed.model_copy(update={"chroma_mode": "embedded"}))  # nothing to check in-process


def test_a_one_shot_search_falls_back_before_loading_the_model(managed: Settings) -> None:
    """``memsync search`` with no server: the answer comes before the embedding model is loaded."""
    engine = Searcher(managed)  # the shipped model, loaded on first use of the vector side
    try:
        t = time.perf_counter()
        resp = engine.search(SearchRequest(query="caching", window_days=0))
        elapsed = time.perf_counter() - t
        assert resp.mode is Mode.LEXICAL_FALLBACK and resp.results
        assert engine._vector is None, "the model was loaded for a store that cannot answer"
        assert elapsed < FAST_S, f"{elapsed * 1000:.0f} ms"
    finally:
        engine.close()


class _SlowCount:
    """A collection whose query answers with fewer documents than asked (as Chroma's HNSW does past
    its ef_search) and whose count does not answer before ``release`` (a cold server's first count)
    or fails outright."""

    name = "memsync-g1"

    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.release = threading.Event()
        self.counts = 0

    def query(self, **kwargs: object) -> dict[str, list[list[object]]]:
        return {"ids": [["obs_1_title", "obs_2_title"]], "distances": [[0.1, 0.2]]}

    def count(self) -> int:
        self.counts += 1
        if self.fail:
            raise ConnectionError("connection reset")
        self.release.wait(10)
        return 2


@pytest.mark.parametrize("fail", [False, True], ids=["count-past-the-deadline", "count-fails"])
def test_a_count_that_does_not_answer_keeps_the_query_s_answer(managed: Settings, fail: bool,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The query answered with fewer documents than asked; whether the store is exhausted needs its
    count. A count past the deadline or failing means "not exhausted" (look deeper), never a
    VectorUnavailable that would send the search to its lexical fallback."""
    store = VectorStore(managed.model_copy(update={"search_timeout_ms": 50}), FakeEmbedder())
    collection = _SlowCount(fail)
    monkeypatch.setattr(store, "_open", lambda: collection)
    try:
        hits, exhaustive = store.nearest_docs(FakeEmbedder().embed(["caching"])[0], 5)
        assert [h.id for h in hits] == [1, 2] and exhaustive is False
        if not fail:  # (a failed count drops the connection: the next searches wait for the retry)
            # The searches after it within COUNT_TTL_S do not ask again: counts past the deadline
            # would otherwise fill the pool's threads until a query itself timed out.
            for _ in range(3):
                hits, exhaustive = store.nearest_docs(FakeEmbedder().embed(["caching"])[0], 5)
                assert [h.id for h in hits] == [1, 2] and exhaustive is False
            assert collection.counts == 1
    finally:
        collection.release.set()
        store.close()
