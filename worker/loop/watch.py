"""File events as hints (polling is the truth): a watchdog observer on the database's directory that only wakes
the worker loop early. No work happens on the observer thread; a missed event only delays a sync
until the next poll."""

from __future__ import annotations

import threading
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

# Opening or closing a file without writing it changes nothing, and the worker's own reads make
# these events: taken as hints, each failed open of a database that cannot be read woke the loop
# for another try at once, ~18 tries a second instead of the backoff.
_READS = frozenset({"opened", "closed_no_write"})  # watchdog's names (not all versions export them)


class _Hint(FileSystemEventHandler):
    def __init__(self, names: set[str], wake: threading.Event) -> None:
        self.names, self.wake = names, wake

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in _READS:
            return
        for path in (event.src_path, getattr(event, "dest_path", "")):
            if path and Path(str(path)).name in self.names:
                self.wake.set()
                return


def watch_database(db: Path, wake: threading.Event) -> object:
    """Start an observer that sets ``wake`` on changes to the db file, its WAL or journal.
    Returns the observer (call ``stop()`` and ``join()``)."""
    names = {db.name, f"{db.name}-wal", f"{db.name}-journal"}
    observer = Observer()
    observer.daemon = True
    observer.schedule(_Hint(names, wake), str(db.parent), recursive=False)
    observer.start()
    return observer
