"""What every job of the worker process uses, whichever room it runs in: structured logging and
its event names (``logs``: import the module, its events are read as ``logs.SYNC_BATCH``), memory
freed back to the system after bulk work (``memory``), and signals that cannot deadlock the main
thread (``signals``, also every command's Ctrl-C). It imports no other room.

Importing the room imports none of its modules: a name of ``__all__`` is imported on first use
(``memsync.worker.lazy_exports``).
"""

from typing import TYPE_CHECKING

from memsync.worker import lazy_exports

if TYPE_CHECKING:
    from memsync.worker.process.memory import Trimmer, freeze_startup, release_responses
    from memsync.worker.process.signals import SignalRelay

__all__ = ["SignalRelay", "Trimmer", "freeze_startup", "release_responses"]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "memory": ("Trimmer", "freeze_startup", "release_responses"),
        "signals": ("SignalRelay",),
    })
