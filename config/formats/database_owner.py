"""``DATA_DIR/database.json``: the one database a data directory belongs to, and which data
directory goes with a database (the rule is told once, in docs/operations.md, "One data directory
per database").

Everything in a data directory (sync records, Chroma's collections, the text index, the vector
copy, ``worker.json``) is derived from one database. A second database synced into the same
directory replaces the first one's store under its worker, silently. So a directory records its
database when a writer first uses it (a worker, a resync that is not a dry run, the demo; never a
read-only command, whose look at a database says nothing about whose store the directory holds),
and every command given another database refuses with one line naming both
(:class:`DatabaseMismatch`, a ConfigError: exit 2). The record lives in memsync's own directory;
the agent's database is never written.

The database's identity is its resolved path (symlinks followed). claude-mem's ``VACUUM``
rewrites the file in place, and a restore from a backup or a rewrite-then-rename gives a new inode
at the same path: all of these are still the same database, whose store the next reconcile brings
in step. The file's device and inode are recorded beside the path for one purpose only: when the
recorded path no longer exists and the database given is that very file (same device and inode),
the database was moved, and the record follows it. An inode alone never decides, since a deleted
file's inode is handed to the next file created.

Upgrading from a version without the record: the first writer on an unrecorded directory records
the database its last worker followed (``worker.json``) while that file still exists, else its own;
a read-only command compares only with that ``worker.json``. The demo database is the exception
to "one directory": it is generated inside the configured data directory
(``DATA_DIR/demo/claude-mem.db``) and works in ``DATA_DIR/demo``, a data directory of its own
(:func:`data_dir_for`), so trying the demo never claims the directory a real database will use.

To find the worker of a database (a hook, a server): :func:`for_database` gives the data directory
that goes with it, :func:`claim` says whether that directory is its own, and ``worker.json`` there
(``config.formats.worker_status.worker_state`` with the database) whether its worker is up.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memsync.config.errors import ConfigError
from memsync.config.formats.worker_status import read_worker_status
from memsync.config.settings import Settings

OWNER_FILE = "database.json"
DEMO_DIR = "demo"  # DATA_DIR/demo: the demo database and its own data directory
DEMO_DB_NAME = "claude-mem.db"


class DatabaseMismatch(ConfigError):
    """The data directory belongs to another database: give this one a data directory of its own."""


def demo_db_path(data_dir: Path) -> Path:
    """Where the demo database is generated for the configured data directory ``data_dir``."""
    return data_dir / DEMO_DIR / DEMO_DB_NAME


def data_dir_for(data_dir: Path, db: Path) -> Path:
    """The data directory that goes with database ``db`` when ``data_dir`` is configured: the demo
    database's own (``DATA_DIR/demo``), else ``data_dir`` itself (which must then belong to ``db``:
    :func:`claim`). Idempotent: the demo's own directory maps to itself."""
    return data_dir / DEMO_DIR if db == demo_db_path(data_dir) else data_dir


def for_database(settings: Settings) -> Settings:
    """``settings`` with the data directory that goes with its database (:func:`data_dir_for`)."""
    own = data_dir_for(settings.data_dir, settings.db)
    return settings if own == settings.data_dir else settings.model_copy(update={"data_dir": own})


def is_demo(settings: Settings) -> bool:
    """Whether ``settings`` read the demo database, in its own data directory or not yet moved there."""
    in_own = settings.data_dir.name == DEMO_DIR and settings.db == settings.data_dir / DEMO_DB_NAME
    return in_own or settings.db == demo_db_path(settings.data_dir)


@dataclass(frozen=True, slots=True)
class DatabaseIdentity:
    """A database as a data directory records it: its resolved path, and the device and inode of
    the file when it existed (None otherwise)."""

    path: str
    dev: int | None = None
    ino: int | None = None

    @classmethod
    def of(cls, db: Path) -> DatabaseIdentity:
        """The identity of the database at ``db`` now."""
        path = db.expanduser().resolve()
        try:
            st = path.stat()
        except OSError:
            return cls(str(path))
        return cls(str(path), st.st_dev, st.st_ino)

    def moved_to(self, other: DatabaseIdentity) -> bool:
        """Whether ``other`` is this same file at a new path: this path is gone and ``other`` has
        this device and inode."""
        return (self.ino is not None and (self.dev, self.ino) == (other.dev, other.ino)
                and not Path(self.path).exists())


def recorded(data_dir: Path) -> DatabaseIdentity | None:
    """The database ``data_dir`` belongs to, or None when it has no record (yet, or unreadable)."""
    try:
        raw: Any = json.loads((data_dir / OWNER_FILE).read_text())
        return DatabaseIdentity(str(raw["path"]), raw.get("dev"), raw.get("ino"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write(data_dir: Path, owner: DatabaseIdentity, *, replace: bool) -> None:
    """Write the record; without ``replace``, only when none exists (a link never overwrites, so
    two commands claiming a new directory at once agree on the first)."""
    tmp = data_dir / f"{OWNER_FILE}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps({**asdict(owner), "recorded_at_ms": int(time.time() * 1000)}))
        if replace:
            os.replace(tmp, data_dir / OWNER_FILE)
        else:
            with contextlib.suppress(FileExistsError):
                os.link(tmp, data_dir / OWNER_FILE)
    finally:
        tmp.unlink(missing_ok=True)


def _adopted(data_dir: Path, current: DatabaseIdentity) -> DatabaseIdentity:
    """Whom an unrecorded directory belongs to: the database its last worker followed while that
    file exists (its store is that one's), else ``current``. An older version kept the demo's store
    in the configured directory itself; the demo now has its own, so that worker.json does not count."""
    db = (read_worker_status(data_dir) or {}).get("db")
    if not isinstance(db, str) or not Path(db).is_absolute() or not Path(db).exists():
        return current
    if Path(db).resolve() == demo_db_path(data_dir).resolve():
        return current
    return DatabaseIdentity.of(Path(db))


def mismatch_message(data_dir: Path, owner: str, db: Path | str) -> str:
    """The one line a command given another database refuses with."""
    return (f"the data directory {data_dir} belongs to the database {owner}, not {db}: give this database a "
            "data directory of its own (--data-dir or MEMSYNC_DATA_DIR)")


def claim(settings: Settings, *, create: bool = False) -> DatabaseIdentity | None:
    """Check that ``settings.data_dir`` belongs to ``settings.db``: DatabaseMismatch (one line
    naming both) when it belongs to another database. Returns the directory's database, or None
    when it has no record (nothing recorded, or nothing checked).

    Only a writer (``create``: worker, resync, demo) records: it creates a missing directory,
    records an unrecorded one (adopting it, :func:`_adopted`) and updates the record of a rewritten
    or moved database. A reader (status, search, verify, the servers, a dry run) never writes the
    record: its look at a database says nothing about whose store the directory holds, and a
    record it wrote would refuse the directory's own writer later. On an unrecorded directory a
    reader compares only with what a writer left (``worker.json``'s database), else checks nothing.
    A database that does not exist is not checked either: the command fails on it by itself, with
    the better message."""
    data_dir = settings.data_dir
    if not settings.db.exists() or not (create or data_dir.is_dir()):
        return None
    current = DatabaseIdentity.of(settings.db)
    owner = recorded(data_dir)
    if owner is None and not create:
        followed = _adopted(data_dir, current)  # ``current`` itself when no worker left another one
        if followed.path != current.path:
            raise DatabaseMismatch(mismatch_message(data_dir, followed.path, current.path))
        return None
    if owner is None:
        adopted = _adopted(data_dir, current)
        data_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            # A directory that cannot be written now (a full disk, read-only) records nothing: no
            # store can be replaced through it now either, and the next writer records it.
            _write(data_dir, adopted, replace=False)
        owner = recorded(data_dir) or adopted
    if owner.path == current.path or owner.moved_to(current):
        if create and owner != current:  # rewritten at its path (a restore, a rename over it), or moved
            with contextlib.suppress(OSError):
                _write(data_dir, current, replace=True)
        return current
    raise DatabaseMismatch(mismatch_message(data_dir, owner.path, current.path))
