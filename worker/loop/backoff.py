"""Exponential backoff with sparse logging (one line per outage, not per try): pure, time is an input."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Backoff:
    """Delay grows from ``interval`` to ``cap`` while failures repeat; success resets it.

    ``fail()`` returns True only for the first failure of a run (log "degraded" once);
    ``succeed()`` returns the number of failures the run had (log "recovered" once when > 0).
    """

    interval: float
    cap: float
    factor: float = 2.0
    failures: int = 0

    @property
    def delay(self) -> float:
        """Seconds to wait before the next attempt."""
        if self.failures == 0:
            return self.interval
        return float(min(self.cap, self.interval * self.factor ** (self.failures - 1)))

    def fail(self) -> bool:
        """Record a failure; True when this one starts a degraded period."""
        self.failures += 1
        return self.failures == 1

    def succeed(self) -> int:
        """Record a success; returns how many failures it ends (0 when there were none)."""
        ended, self.failures = self.failures, 0
        return ended
