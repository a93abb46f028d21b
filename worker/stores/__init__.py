"""The derived stores the sync pass keeps beside Chroma, each written here and read by the search:
memsync's text index (``textsync``, tantivy), the local vector copy's writer (``vectorcopy``, with
``copykeys``, its index of live documents), vectors by text looked up before embedding
(``embedstore``), and compaction of the Chroma store (``compact``). It imports ``rows`` and
``process``, never the pass that writes through it.

Importing the room imports none of its modules: a name of ``__all__`` is imported on first use
(``memsync.worker.lazy_exports``).
"""

from typing import TYPE_CHECKING

from memsync.worker import lazy_exports

if TYPE_CHECKING:
    from memsync.worker.stores.compact import CompactResult
    from memsync.worker.stores.embedstore import BatchVectors, Busy, EmbeddingStore, collect_garbage, store_model
    from memsync.worker.stores.textsync import TextSync
    from memsync.worker.stores.vectorcopy import VectorCopyWriter, drop_copy, fill_from_store, open_writer

__all__ = [
    "BatchVectors", "Busy", "CompactResult", "EmbeddingStore", "TextSync", "VectorCopyWriter",
    "collect_garbage", "drop_copy", "fill_from_store", "open_writer", "store_model",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "compact": ("CompactResult",),
        "embedstore": ("BatchVectors", "Busy", "EmbeddingStore", "collect_garbage", "store_model"),
        "textsync": ("TextSync",),
        "vectorcopy": ("VectorCopyWriter", "drop_copy", "fill_from_store", "open_writer"),
    })
