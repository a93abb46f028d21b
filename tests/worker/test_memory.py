"""Giving freed memory back to the system (``worker.memory``): when the worker trims."""

from __future__ import annotations

from memsync.worker import memory


class TestTrimmer:
    def test_trims_after_work_at_most_every_interval(self) -> None:
        now = [1000.0]
        trimmer = memory.Trimmer(clock=lambda: now[0])
        assert not trimmer.maybe()  # nothing was done
        trimmer.worked()
        assert trimmer.maybe() is memory.trim()  # True on glibc
        trimmer.worked()
        now[0] += memory.TRIM_EVERY_S / 2
        assert not trimmer.maybe()  # too soon: kept for later
        now[0] += memory.TRIM_EVERY_S
        assert trimmer.maybe() is memory.trim()
        assert not trimmer.maybe()
