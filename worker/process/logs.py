"""Structured logging (structlog): JSON lines when stderr is not a terminal, readable when it is.

Event names are stable snake_case constants here, so scripts and dashboards can rely on them.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

SYNC_BATCH = "sync_batch"
SYNC_DONE = "sync_done"
SYNC_INTERRUPTED = "sync_interrupted"
SYNC_YIELDED = "sync_yielded"  # a full pass let the rows committed meanwhile go first; it goes on
ROW_FAILED = "row_failed"
REBUILD_SWITCHED = "rebuild_switched"
COMPACTED = "compacted"
SPACE_RECLAIMED = "space_reclaimed"
VECTOR_COPY_DAMAGED = "vector_copy_damaged"
VECTOR_COPY_FAILED = "vector_copy_failed"
VECTOR_COPY_FILLED = "vector_copy_filled"
VECTOR_COPY_REORDERED = "vector_copy_reordered"
EMBEDDING_STORE_FAILED = "embedding_store_failed"  # a lookup or write failed: those texts are embedded
EMBEDDING_STORE_DAMAGED = "embedding_store_damaged"  # embeddings.db unreadable: replaced by an empty one
EMBEDDING_STORE_BAD_ENTRIES = "embedding_store_bad_entries"  # entries not trusted: embedded again
EMBEDDING_STORE_COLLECTED = "embedding_store_collected"  # vectors no record names were removed
STATE_DAMAGED = "state_damaged"  # state.db unreadable: moved aside, records rebuilt from the store
STORE_DAMAGED = "store_damaged"  # Chroma cannot read a collection: recreated (local) or a cure named
STORE_ALIGNED = "store_aligned"  # sync records corrected to what the store holds (then re-driven)
CHROMA_SERVER_STARTED = "chroma_server_started"
CHROMA_SERVER_STOPPED = "chroma_server_stopped"

_configured = False


def configure(level: str = "info", json_logs: bool | None = None) -> None:
    """Configure structlog once per process; ``json_logs`` None means: JSON unless stderr is a TTY."""
    global _configured
    as_json = (not sys.stderr.isatty()) if json_logs is None else json_logs
    renderer: Any = structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper(), logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    _configured = True


def get_logger(**context: Any) -> Any:
    """A bound logger with ``context`` (configures defaults on first use)."""
    if not _configured:
        configure()
    return structlog.get_logger("memsync").bind(**context)
