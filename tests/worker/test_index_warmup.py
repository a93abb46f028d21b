"""The worker's first query after connecting (``worker.pipeline.target.IndexWarmup``): reported as loading
while the server answers it, then as loaded with the time it took; retried while the server fails,
and abandoned when the worker stops."""

from __future__ import annotations

import threading
from typing import Any

from memsync.worker.pipeline.target import IndexWarmup


class SlowCollection:
    """A collection whose query waits for ``release`` and fails ``failures`` times first."""

    def __init__(self, failures: int = 0) -> None:
        self.release = threading.Event()
        self.failures = failures
        self.calls: list[dict[str, Any]] = []

    def query(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if self.failures:
            self.failures -= 1
            raise RuntimeError("index not ready")
        assert self.release.wait(10)
        return {"ids": [[]]}


def _finish(w: IndexWarmup) -> None:
    assert w._thread is not None
    w._thread.join(10)
    assert not w._thread.is_alive()


def test_loading_until_the_first_query_answers_then_its_duration() -> None:
    w, c = IndexWarmup(), SlowCollection()
    w.start(c, 4, threading.Event())
    assert w.loading_since_ms is not None and w.loaded_in_ms is None
    w.start(c, 4, threading.Event())  # already asking: no second query
    c.release.set()
    _finish(w)
    assert w.loading_since_ms is None and w.loaded_in_ms is not None and w.loaded_in_ms >= 0
    assert len(c.calls) == 1 and c.calls[0]["n_results"] == 1 and len(c.calls[0]["query_embeddings"][0]) == 4


def test_a_failing_server_is_asked_again_and_a_stop_ends_the_wait() -> None:
    w, c = IndexWarmup(), SlowCollection(failures=2)
    c.release.set()
    w.start(c, 4, threading.Event())
    _finish(w)
    assert len(c.calls) == 3 and w.loaded_in_ms is not None
    stopped = threading.Event()
    stopped.set()
    w2, c2 = IndexWarmup(), SlowCollection(failures=100)
    w2.start(c2, 4, stopped)
    _finish(w2)
    assert len(c2.calls) == 1 and w2.loaded_in_ms is None and w2.loading_since_ms is None
