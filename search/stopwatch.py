"""A stopwatch for the stages of a search: the ``timings_ms`` of a response."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


def _ms_since(start: float) -> float:
    """Milliseconds since ``start`` (a ``time.perf_counter()`` value)."""
    return (time.perf_counter() - start) * 1000


class Stopwatch:
    """Milliseconds per named stage, in the order the stages first ran, and since the watch started."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.timings: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Times the block under ``name`` (added up when it runs again); a block that raises is not recorded."""
        start = time.perf_counter()
        yield
        self.timings[name] = self.timings.get(name, 0.0) + _ms_since(start)

    def total(self, name: str = "total") -> None:
        """Records under ``name`` the time since the watch started."""
        self.timings[name] = _ms_since(self.started)
