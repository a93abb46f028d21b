"""One BLAS thread while a search multiplies vectors.

numpy's bundled OpenBLAS starts a thread per core for every product above a small size, and its
threads spin while they wait. A search already runs its lexical side beside its semantic side, and
a server runs searches side by side, so on two cores the extra threads only take turns with work
that was going on anyway: the vector copy's scan of a 90-day window (77k documents) measured
4.6-5.9 ms with one BLAS thread against 9-25 ms with two, on a busy machine (``scripts/bench_search``).

The limit is the process's (BLAS has no per-thread setting): it is taken by the first search that
enters and given back by the last one that leaves, so overlapping searches never restore it under
each other. threadpoolctl finds the BLAS numpy loaded and sets its thread count (8 µs a round).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from threadpoolctl import ThreadpoolController

_lock = threading.Lock()
_inside = 0
_controller: ThreadpoolController | None = None
_limit: Any = None  # the active limit, restored when the last search leaves


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the body with BLAS on one thread (see the module docstring)."""
    global _inside, _controller, _limit
    with _lock:
        if _inside == 0:
            if _controller is None:
                _controller = ThreadpoolController()  # scans the loaded libraries once (~1 ms)
            _limit = _controller.limit(limits=1, user_api="blas")
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0 and _limit is not None:
                _limit.restore_original_limits()
                _limit = None
