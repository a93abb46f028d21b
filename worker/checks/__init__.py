"""Checks of what the worker wrote, for ``memsync status``, ``memsync verify`` and the HTTP API's
status: ``status`` counts, per kind and project, rows in SQLite against documents acknowledged in
Chroma and gives the health verdict (``verdict``); ``verify`` compares the documents the database
implies with what Chroma holds. The functions ``status`` and ``verify`` share their modules' names
(a re-export would be hidden by the module once it is loaded), so they are imported from the modules.

Importing the room imports none of its modules: a name of ``__all__`` is imported on first use
(``memsync.worker.lazy_exports``).
"""

from typing import TYPE_CHECKING

from memsync.worker import lazy_exports

if TYPE_CHECKING:
    from memsync.worker.checks.status import verdict

__all__ = ["verdict"]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "status": ("verdict",),
    })
