"""``DATA_DIR/first_sync/<collection>.json``: how far a first sync has come, so that a search
never presents a partial semantic side as complete.

A full pass goes newest first (``worker.pipeline.sync``), each kind by id ranges from the top: the rows of a
kind at or below its cursor are still to compare, every row above it (up to the records'
watermarks) is synced. While a pass runs over a generation whose records do not yet cover its rows
(a first sync, or one taken up after a crash), the pass keeps its cursor in this file
(``worker.pipeline.frontier``) and deletes it when it is through. A search reads it (one ``stat`` when it is
absent, the usual case) and counts the rows of its own scope at or below the cursor: those may lack
documents (``search.coverage``). A cursor written late only overstates what is missing.

Shared by the worker, which writes it, and the search, which only reads it.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from memsync.config.claude_mem.schema import KINDS, Kind

DIR = "first_sync"
VERSION = 1

INF_ID = 2**62  # a cursor at the top: every row of the kind is still to compare
Cursor = dict[Kind, int]  # a newest-first pass's place: per kind, rows at or below the id are still to compare


def every_kind() -> Cursor:
    """A new pass's cursor: every row of every kind still to compare."""
    return dict.fromkeys(KINDS, INF_ID)


def mark_path(data_dir: Path, collection: str) -> Path:
    """Where a collection generation's first-sync cursor lives."""
    return data_dir / DIR / f"{collection}.json"


def write_mark(data_dir: Path, collection: str, cursor: Cursor, written_ms: int) -> None:
    """Replace the cursor atomically (a reader sees the old one or the new one, never a mix)."""
    path = mark_path(data_dir, collection)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    payload = {"version": VERSION, "collection": collection, "written_ms": written_ms,
               "cursor": {kind.value: at for kind, at in cursor.items()}}
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


def clear_mark(data_dir: Path, collection: str) -> None:
    """The pass is through: every row is compared (a missing file is no error)."""
    mark_path(data_dir, collection).unlink(missing_ok=True)


# Parsed marks per path, by file identity: a search pays one stat while nothing changed.
_cache: dict[Path, tuple[tuple[int, int, int], Cursor | None]] = {}
_cache_lock = threading.Lock()


def read_mark(data_dir: Path, collection: str) -> Cursor | None:
    """The cursor of a first sync under way for ``collection``; None when there is none. An
    unreadable file counts as a first sync that has compared nothing (every kind at the top):
    missing documents are overstated, never hidden."""
    path = mark_path(data_dir, collection)
    try:
        st = path.stat()
    except OSError:
        return None
    identity = (st.st_ino, st.st_mtime_ns, st.st_size)
    with _cache_lock:
        hit = _cache.get(path)
    if hit is not None and hit[0] == identity:
        return hit[1]
    cursor = _parse(path)
    with _cache_lock:
        _cache[path] = (identity, cursor)
    return cursor


def _parse(path: Path) -> Cursor | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        return {Kind(k): int(v) for k, v in dict(data["cursor"]).items()}
    except FileNotFoundError:
        return None  # deleted between the stat and the read: the pass is through
    except (OSError, ValueError, KeyError, TypeError):
        return every_kind()
