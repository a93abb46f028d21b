"""The Chroma side of the worker loop: the connection (a managed server adopted or started, or
``http``/``embedded``), the active generation's sink and its local vector copy.

Opened lazily by the loop before each step and closed when Chroma fails (the next step connects
again, and in managed mode restarts a server that died); the copy writer outlives a reconnect as
long as the active generation stays the same.
"""

from __future__ import annotations

import contextlib
import os
import signal

from memsync.config.chroma import collections as stores
from memsync.config.chroma.server import ManagedServer
from memsync.config.embedding import Embedder
from memsync.config.settings import Settings
from memsync.worker.sink import ChromaSink
from memsync.worker.state import ACTIVE_COLLECTION, SyncState
from memsync.worker.vectorcopy import VectorCopyWriter, open_writer


class SyncTarget:
    """What the worker writes to; ``server`` is None unless ``chroma_mode`` is ``managed``."""

    def __init__(self, settings: Settings, embedder: Embedder) -> None:
        self.s = settings
        self.embedder = embedder
        self.server = ManagedServer(settings) if settings.chroma_mode == "managed" else None
        self.handle: stores.ChromaHandle | None = None
        self.sink: ChromaSink | None = None
        self.copy: VectorCopyWriter | None = None  # the local vector copy of the active generation

    @property
    def collection(self) -> str | None:
        """The active generation's name while connected, else None."""
        return self.sink.name if self.sink is not None else None

    def open(self, state: SyncState) -> bool:
        """Connect when not connected, record the active generation in ``state`` and open its copy
        writer. True when it connected now (StoreUnavailable when it could not)."""
        if self.sink is not None:
            return False
        # Managed mode: ensure() adopts the healthy server or starts (restarts) one.
        self.handle = stores.connect(self.s, server=self.server)
        collection = stores.open_collection(self.handle.client, self.s, self.embedder.model_id,
                                            self.embedder.dimension)
        self.sink = ChromaSink(collection, self.handle.client.get_max_batch_size())
        state.set_meta(ACTIVE_COLLECTION, self.sink.name)
        if self.copy is not None and self.copy.collection != self.sink.name:
            self.close_copy()
        if self.copy is None:
            self.copy = open_writer(self.s, state, self.sink.name, self.embedder.model_id, self.embedder.dimension)
        return True

    def close_store(self) -> None:
        """Drop the Chroma connection (errors while closing it are ignored)."""
        if self.handle is not None:
            with contextlib.suppress(Exception):
                self.handle.close()
        self.handle, self.sink = None, None

    def close_copy(self) -> None:
        """Close the vector copy writer (a failed copy is not used again until the next open)."""
        if self.copy is not None:
            self.copy.close()
            self.copy = None

    def close(self) -> None:
        """Close everything and stop the managed server if this worker started it."""
        self.close_store()
        self.close_copy()
        if self.server is not None:
            self.server.stop()

    def kill_server(self) -> None:
        """SIGTERM to the managed server this worker started, without waiting (an exit right now)."""
        if self.server is not None and self.server.started and self.server.info:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.server.info.pid, signal.SIGTERM)
