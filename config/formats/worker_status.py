"""``DATA_DIR/worker.json``: what the running worker says about itself.

Written by the worker (``memsync.worker.loop.health``) and read by ``memsync status`` and the HTTP
server's status (``memsync.worker.checks.status``), and by a second worker that finds the lock taken
(``memsync.worker.loop.lock``, for the pid in its error).

The worker writes the file as soon as it holds its lock (``phase`` ``starting``), then replaces it
atomically (temp file + rename) when a pass ran, and at least every ``HEARTBEAT_EVERY_S`` as a
heartbeat, during a long first pass too (``phase`` ``first pass``, with ``pass_rows_done``), and
while a model call is in flight, for as long as that call can take (``waiting_on``). A
reader calls the worker up only while its pid is alive, it is not stopping and its heartbeat is
younger than ``STALE_MS``.

**A disk that is full (or read-only)** leaves no room for the temp file: then the worker writes the
same record in place into ``worker.heartbeat`` (``HEARTBEAT_FILE``), a file of ``HEARTBEAT_BYTES``
it fills when it takes its lock. Overwriting bytes a file already has needs no new space (on
tmpfs, ext4 and xfs; a copy-on-write file system may still refuse), so the heartbeat, the degraded
state and its reason still reach ``status``. A reader takes whichever of the two files holds the
newer heartbeat; a record read from ``worker.heartbeat`` carries ``status_unwritable`` (why
``worker.json`` could not be written).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memsync.chroma.server import pid_alive

STATUS_FILE = "worker.json"
HEARTBEAT_FILE = "worker.heartbeat"  # the same record, written in place when worker.json cannot be
HEARTBEAT_BYTES = 16384  # its fixed size: the record padded with spaces (a record is 1-3 KB)
HEARTBEAT_EVERY_S = 5.0  # an idle worker rewrites the file this often
STALE_MS = 30_000  # a heartbeat older than this: the worker is not up (hung, or killed without a word)
DEFAULT_MAX_LAG_S = 60.0  # seconds of lag a health check tolerates (worker.checks.status.verdict)

# What the worker is doing (not down while starting): it took its lock and is opening the stores; its first full
# pass, which on a large database embeds for a long time; following the database after it.
PHASE_STARTING = "starting"
PHASE_FIRST_PASS = "first pass"
PHASE_FOLLOWING = "following"


@dataclass
class WorkerStatus:
    """The fields of ``worker.json`` (times in epoch milliseconds)."""

    pid: int
    started_at_ms: int
    mode: str
    db: str
    heartbeat_ms: int = 0
    phase: str = PHASE_STARTING
    pass_rows_done: int = 0  # rows the running (or last) pass has compared so far: the first pass's progress
    # During the first pass (worker.pipeline.progress): searchable_from_ms, rows_left, documents_left,
    # window_rows_left, window_days, docs_per_s, rows_per_s, eta_window_s, eta_all_s.
    first_sync: dict[str, Any] | None = None
    chroma_reachable: bool = False
    embedding_reachable: bool = True  # False while a remote embedding endpoint fails (the rows wait)
    degraded: bool = False
    consecutive_errors: int = 0
    retry_in_s: float = 0.0  # degraded: the backoff before the next try (grows to backoff_cap_s)
    next_retry_ms: int | None = None  # degraded: when the next try is due
    last_error: str | None = None
    chroma_refused: str | None = None  # why Chroma refuses us (token, tenant, database, certificate)
    last_sync_ms: int | None = None
    last_reconcile_ms: int | None = None
    reconciles: int = 0
    compactions: int = 0
    passes: int = 0
    lag_ms: int = 0
    pending_rows: int = 0
    failed_rows: int = 0
    stopping: bool = False
    totals: dict[str, int] = field(default_factory=dict)
    # The active collection against the sync records (worker.pipeline.target.check_store), at every
    # reconcile and health check: its count, when it was read, the records' acknowledged documents,
    # since when the two counts differ (None: equal), and how many alignments corrected records.
    store_documents: int | None = None
    store_read_at_ms: int | None = None
    records_documents: int = 0
    store_differs_since_ms: int | None = None
    store_repairs: int = 0
    # The server's vector index (worker.pipeline.target.IndexWarmup): loading since (None: not loading), and
    # how long its last load took.
    index_loading_since_ms: int | None = None
    index_loaded_in_ms: int | None = None
    # Why the last refresh of memsync's text index failed, None when it did not (worker.stores.textsync:
    # searches then match words through FTS5; a refresh that fails every time is otherwise only a log line).
    text_index_error: str | None = None
    # A call the loop waits on now (worker.loop.health.Health.busy): what, since when, and the longest it
    # can take; the heartbeat is refreshed meanwhile, for that long at most. None: not waiting.
    waiting_on: dict[str, Any] | None = None

    # Why worker.json could not be written (a full or read-only disk): set only in the record
    # written in place (HEARTBEAT_FILE).
    status_unwritable: str | None = None

    def write(self, data_dir: Path) -> None:
        """Replace ``worker.json`` in ``data_dir`` atomically (temp file + rename)."""
        tmp = data_dir / (STATUS_FILE + ".tmp")
        tmp.write_text(json.dumps(vars(self)))
        os.replace(tmp, data_dir / STATUS_FILE)

    def write_in_place(self, data_dir: Path, why: str) -> bool:
        """Overwrite ``worker.heartbeat`` (reserved by :func:`reserve_in_place`) with this record,
        saying ``why`` worker.json could not be written; False when there is no such file or the
        record does not fit. Needs no new space on the disk."""
        data = json.dumps({**vars(self), "status_unwritable": why}).encode()
        if len(data) > HEARTBEAT_BYTES:
            return False
        try:
            fd = os.open(data_dir / HEARTBEAT_FILE, os.O_WRONLY)  # never created here: that takes space
        except OSError:
            return False
        try:
            return os.pwrite(fd, data.ljust(HEARTBEAT_BYTES), 0) == HEARTBEAT_BYTES
        except OSError:
            return False
        finally:
            os.close(fd)


def reserve_in_place(data_dir: Path) -> None:
    """Make sure ``worker.heartbeat`` exists at its full size, its bytes written (so that later
    writes in place need no space); nothing when it cannot be (a disk already full)."""
    path = data_dir / HEARTBEAT_FILE
    try:
        if path.stat().st_size == HEARTBEAT_BYTES:
            return
    except OSError:
        pass
    with contextlib.suppress(OSError):
        path.write_bytes(b" " * HEARTBEAT_BYTES)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        got = json.loads(path.read_bytes() or b"null")
    except (OSError, ValueError):
        return None
    return dict(got) if isinstance(got, dict) else None


def read_worker_status(data_dir: Path) -> dict[str, Any] | None:
    """The last status a worker wrote in ``data_dir``: ``worker.json``, or the record written in
    place when that holds the newer heartbeat; None when neither can be read."""
    written = _read_json(data_dir / STATUS_FILE)
    in_place = None
    for _ in range(3):  # a read that met a write in progress is not JSON: read again
        in_place = _read_json(data_dir / HEARTBEAT_FILE)
        if in_place is not None or not (data_dir / HEARTBEAT_FILE).exists():
            break
    if in_place is not None and int(in_place.get("heartbeat_ms") or 0) > int((written or {}).get("heartbeat_ms") or 0):
        return in_place
    return written


def follows_other(worker_db: object, db: Path) -> str | None:
    """The database a worker's ``db`` field names when that is not ``db`` (compared by resolved
    path), else None (the same one, or not said)."""
    if not isinstance(worker_db, str) or not worker_db:
        return None
    return None if Path(worker_db).expanduser().resolve() == db.expanduser().resolve() else worker_db


def worker_state(data_dir: Path, now_ms: int, db: Path | None = None) -> dict[str, Any]:
    """The worker's own report plus ``up`` (its pid is alive, it is not stopping, its heartbeat is
    fresh at ``now_ms``) and ``reason`` (why not, else None). Given the reader's database ``db``, a
    worker that follows another one is not up for it (``follows_other``: the database it follows):
    its lag and progress say nothing about ``db``."""
    raw = read_worker_status(data_dir)
    if raw is None:
        return {"up": False, "reason": "no worker has run for this data directory"}
    other = follows_other(raw.get("db"), db) if db is not None else None
    fresh = now_ms - int(raw.get("heartbeat_ms", 0)) < STALE_MS
    alive = pid_alive(int(raw.get("pid", 0)))
    up = alive and fresh and not raw.get("stopping") and other is None
    reason = (None if up else f"it follows another database, {other}" if other is not None
              else "stopped" if raw.get("stopping") or not alive
              else f"heartbeat is stale: none for {(now_ms - int(raw.get('heartbeat_ms', 0))) // 1000} s, "
                   f"the limit is {STALE_MS // 1000} s")
    return {**raw, "up": up, "reason": reason, "follows_other": other}
