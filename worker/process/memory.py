"""Giving the memory a step freed back to the system (so that the worker's memory stays flat).

The C allocator keeps what Python, numpy, onnxruntime and the Chroma client free: glibc raises its
mmap threshold after a large free, so later buffers of up to 32 MB come from heaps it returns only
from their top. Measured at 100k rows (313k documents): an alignment of the records with the store,
when it held every id and hash in two dicts, took the process from 104 to 374 MB, 352 MB after it
was done, and 130 MB after ``malloc_trim(0)`` (it now compares them on disk: ``worker.rows.state``).
So the worker trims after work that allocates in bulk (a full pass, an alignment, a rewrite of the
vector copy, a compaction, a text index rebuild): at most once every ``TRIM_EVERY_S``; each trim
takes milliseconds. Elsewhere than glibc, nothing happens.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import time
from collections.abc import Callable

TRIM_EVERY_S = 30.0


def _load_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        trim = getattr(libc, "malloc_trim", None)
    except OSError:
        return None
    if trim is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim  # type: ignore[no-any-return]


_trim = _load_trim()


def trim() -> bool:
    """Return the allocator's free pages to the system; False where there is no ``malloc_trim``."""
    if _trim is None:
        return False
    _trim(0)
    return True


def freeze_startup() -> None:
    """Set every object alive now (modules, settings, clients) aside from the cyclic collector
    (``gc.freeze``): a full collection then visits only what was allocated since, well under a
    millisecond in the worker against 45 ms with the 82k objects of its imports. Call once, after
    start-up; what it sets aside is never collected, so only objects that live as long as the process."""
    gc.collect()
    gc.freeze()


FULL_EVERY = 8  # pages between full collections where start-up objects were not set aside
_released = 0


def release_responses() -> None:
    """Free the HTTP responses of the Chroma calls just made; call it after each page of a large
    read. httpx keeps a response and its stream in a reference cycle, so each response's body waits
    for the cyclic collector's next full pass, which runs rarely: paging through the metadata of
    313k documents, 5,000 a page, left 140 MB of bodies per pass (measured), pages with embeddings
    more. The young generations hold a page of metadata's response; a page with embeddings promotes
    it further during its own parse, so a full collection is needed too: after every page in the
    worker (:func:`freeze_startup` makes it cheap), every ``FULL_EVERY`` pages elsewhere (a command
    such as ``resync`` would pay 45 ms a page)."""
    global _released
    _released += 1
    if gc.get_freeze_count() or _released % FULL_EVERY == 0:
        gc.collect()
    else:
        gc.collect(1)


class Trimmer:
    """Trims after bulk work, at most every ``TRIM_EVERY_S`` (time from ``clock``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._due = False
        self._last = float("-inf")

    def worked(self) -> None:
        """A step allocated in bulk: trim at the next :meth:`maybe` that is allowed to."""
        self._due = True

    def maybe(self) -> bool:
        """Trim when work was done and the last trim is old enough; True when it trimmed."""
        now = self._clock()
        if not self._due or now - self._last < TRIM_EVERY_S:
            return False
        self._due = False
        self._last = now
        return trim()
