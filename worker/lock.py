"""``DATA_DIR/worker.lock``: one worker per data directory.

An exclusive ``flock`` held for the worker's whole life (``run`` or ``once``); the kernel drops it
when the process dies, so a killed worker never leaves a stale lock behind. The holder writes its
pid into the file, so a second worker names the first one (issue 24: it said ``pid ?``).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from memsync.config.errors import ConfigError
from memsync.config.formats.worker_status import read_worker_status

LOCK_FILE = "worker.lock"


def holder_pid(data_dir: Path) -> int | None:
    """The pid the lock's holder wrote into the lock file, else the one in ``worker.json``; None
    when neither says (a holder that has not written it yet, a file from an older version)."""
    try:
        text = (data_dir / LOCK_FILE).read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        text = ""
    if text.isdigit() and int(text) > 0:
        return int(text)
    pid = (read_worker_status(data_dir) or {}).get("pid")
    return pid if isinstance(pid, int) and pid > 0 else None


class WorkerLock:
    """The worker lock of one data directory: ``acquire()`` or fail at once, ``release()``."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._fh: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock without waiting and write this process's pid into it; ConfigError naming
        the other worker's pid (when it can be known) when it is held."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fh = open(self.data_dir / LOCK_FILE, "a+")  # noqa: SIM115 - held while the worker runs
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            pid = holder_pid(self.data_dir)
            who = f"another worker (pid {pid})" if pid else "another worker"
            raise ConfigError(f"{who} already runs for {self.data_dir}") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._fh = fh

    def release(self) -> None:
        """Let go of the lock (nothing when it is not held)."""
        if self._fh is not None:
            self._fh.truncate(0)  # the next holder's pid, not ours, is what a reader should find
            self._fh.flush()
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None
