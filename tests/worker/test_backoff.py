"""Backoff: grows to a cap, resets, logs degraded and recovered once."""

from memsync.worker.loop.backoff import Backoff


def test_grows_to_cap_and_resets() -> None:
    b = Backoff(interval=1.0, cap=10.0)
    assert b.delay == 1.0
    starts = [b.fail() for _ in range(6)]
    assert starts == [True, False, False, False, False, False]
    assert b.delay == 10.0  # 1, 2, 4, 8, 16→10, 32→10
    assert b.succeed() == 6
    assert b.delay == 1.0 and b.succeed() == 0
