"""Disk space: telling a full disk from other write failures, and naming where space ran out.

A full disk reaches memsync in three shapes: an ``OSError`` with ``ENOSPC``/``EDQUOT`` (files it
writes itself), an ``sqlite3`` error whose primary code is ``SQLITE_FULL`` (or ``SQLITE_IOERR``,
which SQLite reports when a journal write fails for lack of space), and an internal error from a
local Chroma server (which reports no cause at all). Each is recognised by its class and code,
never by its message, and the free space of the directories memsync writes then decides: a write
that failed where space is below ``low_space_mb`` is a :class:`~memsync.config.errors.NoSpace`.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
from pathlib import Path

from memsync.config.errors import NoSpace, StoreDamaged, StoreUnavailable
from memsync.config.settings import Settings

SQLITE_IOERR, SQLITE_FULL = 10, 13  # primary result codes (the low byte of an extended code)
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def free_bytes(path: Path) -> int | None:
    """Free bytes (for an unprivileged writer) on the file system holding ``path`` or its nearest
    existing parent; None when none can be read."""
    for candidate in (path, *path.parents):
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return None


def low_on_space(path: Path, settings: Settings) -> bool:
    """True when the file system holding ``path`` has less than ``low_space_mb`` free."""
    free = free_bytes(path)
    return free is not None and free < settings.low_space_mb * 1024 * 1024


def _sqlite_code(exc: BaseException) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def is_no_space(exc: BaseException) -> bool:
    """True when ``exc`` (or what it was raised from) says the disk is full by its class and code:
    ENOSPC/EDQUOT, or SQLITE_FULL. SQLITE_IOERR is ambiguous and is decided by :func:`no_space`."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in NO_SPACE_ERRNOS:
            return True
        if isinstance(seen, sqlite3.Error) and _sqlite_code(seen) == SQLITE_FULL:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _maybe_no_space(exc: BaseException) -> bool:
    """A full disk, or an I/O error that a full disk explains (SQLITE_IOERR, EIO)."""
    if is_no_space(exc):
        return True
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, sqlite3.Error) and _sqlite_code(seen) == SQLITE_IOERR:
            return True
        if isinstance(seen, OSError) and seen.errno == errno.EIO:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _where(exc: BaseException, settings: Settings) -> Path | None:
    """The directory that ran out: the one holding the failed file, else the lowest of
    memsync's own (data directory, Chroma path) that is low on space."""
    places = _places(settings)
    filename = getattr(exc, "filename", None)
    if isinstance(filename, str | os.PathLike):
        failed = Path(filename)
        for place in places:
            if failed == place or place in failed.parents:
                return place
        return failed.parent
    return _lowest_low(settings)


def _lowest_low(settings: Settings) -> Path | None:
    """Of memsync's directories below ``low_space_mb`` free, the one with the least (None: none)."""
    free = {p: f for p in _places(settings) if (f := free_bytes(p)) is not None}
    low = [p for p, f in free.items() if f < settings.low_space_mb * 1024 * 1024]
    return min(low, key=free.__getitem__) if low else None


def _places(settings: Settings) -> list[Path]:
    places = [settings.data_dir]
    if settings.chroma_mode != "http" and settings.chroma_dir not in places:
        places.insert(0, settings.chroma_dir)  # the more specific one first when nested
    return places


def no_space(exc: BaseException, settings: Settings) -> NoSpace | None:
    """``exc`` as a NoSpace naming the full directory and the fix, or None when it is not (or
    cannot be shown to be) a full disk: an ambiguous I/O error counts only where space is low."""
    if not _maybe_no_space(exc):
        return None
    where = _where(exc, settings)
    if where is None:
        if not is_no_space(exc):
            return None  # an I/O error with space to spare: not ours to explain
        where = settings.data_dir
    return no_space_at(where, settings, str(exc))


def no_space_at(where: Path, settings: Settings, detail: str) -> NoSpace:
    """The NoSpace error for ``where`` (the data directory or the Chroma path)."""
    free = free_bytes(where)
    shown = f"{free / 1024 / 1024:.1f} MB free" if free is not None else "free space unknown"
    role = "the Chroma path" if where == settings.chroma_dir and where != settings.data_dir else "DATA_DIR"
    return NoSpace(f"no space left on {where} ({role}, {shown}): free space there (or move it with "
                   f"{'MEMSYNC_CHROMA_PATH' if role == 'the Chroma path' else 'MEMSYNC_DATA_DIR'}), then "
                   f"run again; a running `memsync worker` retries by itself [{detail[:160]}]")


def explain(exc: StoreUnavailable, settings: Settings) -> StoreUnavailable | NoSpace:
    """``exc`` as a NoSpace when one of memsync's directories is low on space, else ``exc``: a
    local Chroma server reports a full disk as an internal error, and one that cannot write its
    log or store exits before it answers; neither names the cause, so the free space decides."""
    if settings.chroma_mode == "http" or isinstance(exc, StoreDamaged):
        return exc  # a remote server's disk is not ours to measure
    lowest = _lowest_low(settings)
    return exc if lowest is None else no_space_at(lowest, settings, str(exc))
