"""The two sides a sync pass compares: the agent's rows (``source``: bounded read-only batches) and
the field documents they imply (``documents``, pure), against memsync's sync records of what the
stores hold (``state``); and ``tail``, what changed since (file stamps, newest ids) and the rows not
yet recorded (the lag). Every room above reads rows or records through these; it imports only
``process``.

Importing the room imports none of its modules: a name of ``__all__`` is imported on first use
(``memsync.worker.lazy_exports``).
"""

from typing import TYPE_CHECKING

from memsync.worker import lazy_exports

if TYPE_CHECKING:
    from memsync.worker.rows.documents import (
        MAX_TEXT_CHARS,
        OWN,
        Builders,
        Derivation,
        Document,
        RowError,
        SourceRow,
        build_documents,
        derive,
        payload_hash,
        row_values_hash,
    )
    from memsync.worker.rows.source import SourceReader
    from memsync.worker.rows.state import (
        ACTIVE_COLLECTION,
        FAILED,
        SYNCED,
        DocRecord,
        HeldIds,
        RowFailed,
        RowRecord,
        RowSynced,
        SyncState,
        now_ms,
        open_wal,
    )
    from memsync.worker.rows.tail import FileStamp, SourceTail, oldest_pending_ms, pending_rows, stamp, unrecorded_below

__all__ = [
    "ACTIVE_COLLECTION", "Builders", "Derivation", "DocRecord", "Document", "FAILED", "FileStamp", "HeldIds",
    "MAX_TEXT_CHARS", "OWN", "RowError", "RowFailed", "RowRecord", "RowSynced", "SYNCED", "SourceReader",
    "SourceRow", "SourceTail", "SyncState", "build_documents", "derive", "now_ms", "oldest_pending_ms",
    "open_wal", "payload_hash", "pending_rows", "row_values_hash", "stamp", "unrecorded_below",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "documents": (
            "MAX_TEXT_CHARS", "OWN", "Builders", "Derivation", "Document", "RowError", "SourceRow",
            "build_documents", "derive", "payload_hash", "row_values_hash",
        ),
        "source": ("SourceReader",),
        "state": (
            "ACTIVE_COLLECTION", "FAILED", "SYNCED", "DocRecord", "HeldIds", "RowFailed", "RowRecord",
            "RowSynced", "SyncState", "now_ms", "open_wal",
        ),
        "tail": ("FileStamp", "SourceTail", "oldest_pending_ms", "pending_rows", "stamp", "unrecorded_below"),
    })
