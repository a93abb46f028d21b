"""``DATA_DIR/worker.lock``: one worker per data directory.

An exclusive ``flock`` held for the worker's whole life (``run`` or ``once``); the kernel drops it
when the process dies, so a killed worker never leaves a stale lock behind. The holder writes its
pid into the file, and on the next line the database it follows, so a second worker names the
first one and its database (it once said ``pid ?``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import IO

from memsync.config.errors import ConfigError
from memsync.config.formats.worker_status import read_worker_status

LOCK_FILE = "worker.lock"


def _lock_lines(data_dir: Path) -> list[str]:
    try:
        return (data_dir / LOCK_FILE).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def holder_pid(data_dir: Path) -> int | None:
    """The pid the lock's holder wrote into the lock file, else the one in ``worker.json``; None
    when neither says (a holder that has not written it yet, a file from an older version)."""
    text = next(iter(_lock_lines(data_dir)), "").strip()
    if text.isdigit() and int(text) > 0:
        return int(text)
    pid = (read_worker_status(data_dir) or {}).get("pid")
    return pid if isinstance(pid, int) and pid > 0 else None


def holder_db(data_dir: Path, pid: int | None) -> str | None:
    """The database the lock's holder follows: the line it wrote under its pid, else ``worker.json``'s
    when that file is the holder's (same pid); None when neither says."""
    lines = _lock_lines(data_dir)
    if len(lines) > 1 and lines[1].strip():
        return lines[1].strip()
    raw = read_worker_status(data_dir) or {}
    db = raw.get("db")
    return db if isinstance(db, str) and db and pid is not None and raw.get("pid") == pid else None


class WorkerLock:
    """The worker lock of one data directory: ``acquire()`` or fail at once, ``release()``; ``db``
    is the database the worker follows, written into the lock for a second worker's message."""

    def __init__(self, data_dir: Path, db: Path | None = None) -> None:
        self.data_dir = data_dir
        self.db = db
        self._fh: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock without waiting and write this process's pid (and database) into it;
        ConfigError naming the other worker's pid and database (when they can be known) when it is held."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fh = open(self.data_dir / LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115 - held while the worker runs
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            pid = holder_pid(self.data_dir)
            db = holder_db(self.data_dir, pid)
            said = [text for text in (pid and f"pid {pid}", db and f"following {db}") if text]
            who = f"another worker ({', '.join(said)})" if said else "another worker"
            raise ConfigError(f"{who} already runs for {self.data_dir}") from None
        fh.seek(0)
        fh.truncate()
        # Unbuffered, and a full disk is no reason not to run (the worker waits for space): readers
        # then take the pid from worker.json.
        with contextlib.suppress(OSError):
            os.write(fh.fileno(), (f"{os.getpid()}\n" + ("" if self.db is None else
                                                          f"{self.db.expanduser().resolve()}\n")).encode())
        self._fh = fh

    def release(self) -> None:
        """Let go of the lock (nothing when it is not held)."""
        if self._fh is not None:
            self._fh.truncate(0)  # the next holder's pid, not ours, is what a reader should find
            self._fh.flush()
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None
