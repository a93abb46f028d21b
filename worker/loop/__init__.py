"""The worker loop: the daemon that runs the sync pass again and again (``daemon``: ``Worker``, wake,
back off, stop), its jobs in one table (``schedule``), file events as hints (``watch``), its health
and ``worker.json`` (``health``, ``metrics`` for Prometheus, ``backoff``), idle work (``maintenance``:
vector copy fill, date order, compaction scheduling) and one worker per data directory (``lock``).
Nothing in the worker imports it.

Importing the room imports none of its modules: a name of ``__all__`` is imported on first use
(``memsync.worker.lazy_exports``).
"""

from typing import TYPE_CHECKING

from memsync.worker import lazy_exports

if TYPE_CHECKING:
    from memsync.worker.loop.daemon import Worker

__all__ = ["Worker"]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "daemon": ("Worker",),
    })
