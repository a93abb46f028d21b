"""Cheap change detection for the tail loop: file identity and sizes first (no SQL), then the
highest id per kind. Also the lag: age of the oldest row not yet synced."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from memsync.config.claude_mem.schema import Kind
from memsync.worker.source import SourceReader


@dataclass(frozen=True, slots=True)
class FileStamp:
    """Identity and state of the database files; equal stamps mean nothing was written."""

    inode: int
    db: tuple[int, int]
    wal: tuple[int, int]


def stamp(db: Path) -> FileStamp | None:
    """The current stamp, or None when the database file is missing."""
    try:
        st = os.stat(db)
    except FileNotFoundError:
        return None
    try:
        wst = os.stat(f"{db}-wal")
        wal = (wst.st_size, wst.st_mtime_ns)
    except FileNotFoundError:
        wal = (0, 0)
    return FileStamp(st.st_ino, (st.st_size, st.st_mtime_ns), wal)


def oldest_pending_ms(reader: SourceReader, above: dict[Kind, int]) -> int | None:
    """created_at_epoch of the oldest row above the watermarks, or None when there is none."""
    values = [v for kind, after in above.items() if (v := reader.oldest_after(kind, after)) is not None]
    return min(values) if values else None
