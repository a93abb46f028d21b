"""The search's stage timings (``Response.timings``) in one unit: milliseconds since a
``time.perf_counter()`` reading."""

from __future__ import annotations

import time


def elapsed_ms(t0: float) -> float:
    """Milliseconds since ``t0``, a ``time.perf_counter()`` reading."""
    return (time.perf_counter() - t0) * 1000
