"""Fixtures of the system tests that need a real process beyond memsync's own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.real_claude_mem import ClaudeMemWorker, HarnessMissing
from tests.conftest import free_port


@pytest.fixture
def claude_mem(tmp_path: Path) -> Iterator[ClaudeMemWorker]:
    """The real claude-mem worker on a free loopback port, with its own HOME and data directory under
    ``tmp_path``; stopped (SIGTERM, then SIGKILL) at the end. Fails, not skips, when ``make test`` has
    not installed it: a skipped test would pass CI without ever having run claude-mem."""
    worker = ClaudeMemWorker(tmp_path / "claude-mem-home", free_port())
    try:
        worker.start()
    except HarnessMissing as exc:
        pytest.fail(str(exc))
    try:
        yield worker
    finally:
        worker.stop()
