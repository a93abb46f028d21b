"""The sync pass: ``sync`` compares the documents the rows imply with the sync records, embeds, and
writes through ``sink`` (Chroma) and the derived stores (``overlap``: its one writer thread);
``syncpass`` is the full pass (``Scope``) the worker, ``worker --once`` and resync share, on the
Chroma side ``target`` opens (the connection, the active generation's sink, its vector copy);
``upstream`` is claude-mem's own document format (``writers``: who writes that store); ``frontier``
and ``progress`` say how far a first sync has come; ``resync`` runs the pass once, as a batch (the
function shares its module's name, so it is imported from the module, not the room).

Importing the room imports none of its modules: a name of ``__all__`` is imported on first use
(``memsync.worker.lazy_exports``).
"""

from typing import TYPE_CHECKING

from memsync.worker import lazy_exports

if TYPE_CHECKING:
    from memsync.worker.pipeline.progress import FirstSyncProgress
    from memsync.worker.pipeline.resync import count_rows
    from memsync.worker.pipeline.sink import ChromaSink, MirroredSink, VectorSink
    from memsync.worker.pipeline.sync import Destination, SyncOptions, SyncResult, YieldFn
    from memsync.worker.pipeline.syncpass import EVERY_ROW, Checked, OnResult, Opened, Scope, StoreCollection, SyncPass
    from memsync.worker.pipeline.target import StoreCheck, SyncTarget, store_counts
    from memsync.worker.pipeline.writers import upstream_writers

__all__ = [
    "Checked", "ChromaSink", "Destination", "EVERY_ROW", "FirstSyncProgress", "MirroredSink", "OnResult",
    "Opened", "Scope", "StoreCheck", "StoreCollection", "SyncOptions", "SyncPass", "SyncResult", "SyncTarget",
    "VectorSink", "YieldFn", "count_rows", "store_counts", "upstream_writers",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "progress": ("FirstSyncProgress",),
        "resync": ("count_rows",),
        "sink": ("ChromaSink", "MirroredSink", "VectorSink"),
        "sync": ("Destination", "SyncOptions", "SyncResult", "YieldFn"),
        "syncpass": ("EVERY_ROW", "Checked", "OnResult", "Opened", "Scope", "StoreCollection", "SyncPass"),
        "target": ("StoreCheck", "SyncTarget", "store_counts"),
        "writers": ("upstream_writers",),
    })
