"""``DATA_DIR/worker.lock``: one worker per data directory.

An exclusive ``flock`` held for the worker's whole life (``run`` or ``once``); the kernel drops it
when the process dies, so a killed worker never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import IO

from memsync.config.errors import ConfigError
from memsync.config.formats.worker_status import read_worker_status

LOCK_FILE = "worker.lock"


class WorkerLock:
    """The worker lock of one data directory: ``acquire()`` or fail at once, ``release()``."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._fh: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock without waiting; ConfigError naming the other worker's pid when it is held."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fh = open(self.data_dir / LOCK_FILE, "a+")  # noqa: SIM115 - held while the worker runs
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            other = read_worker_status(self.data_dir) or {}
            raise ConfigError(
                f"another worker (pid {other.get('pid', '?')}) already runs for {self.data_dir}"
            ) from None
        self._fh = fh

    def release(self) -> None:
        """Let go of the lock (nothing when it is not held)."""
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None
