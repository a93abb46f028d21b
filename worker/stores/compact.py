"""Compaction: Chroma keeps the space of every overwritten or deleted vector (measured on chromadb
1.5.9: 20,000 documents, 48.3 MB; after three rounds of updating half and deleting/re-adding a
quarter, 73.7 MB for the same 20,000; a fresh build of them, 48.3 MB). The only way to get it back
is a new collection, so compaction builds the next generation from the live vectors of the
active one, without re-embedding anything: copy in pages, copy the sync records, switch the
pointer, drop the old generation. Searches use the old generation until the switch.

Dropping the old generation does not free its files either: chromadb 1.x leaves a deleted
collection's HNSW segment directory on disk (upstream chroma-core/chroma#5259 and #5520, open;
checked here on 1.5.9, also after a restart), and its log of writes stays in ``chroma.sqlite3``. So
when memsync owns the store (a managed server it started) the worker then stops the server,
removes segment directories that no segment in ``chroma.sqlite3`` names, runs ``chroma vacuum``
(purges the log, VACUUMs the SQLite file) and lets the server start again. Searches answer from
full text for those seconds. In ``http`` mode the store belongs to someone else and only the
collection switch happens.

The worker runs it itself, off-peak (no new rows for ``compact_idle_s``), when the churn counted
since the generation was built (``SyncState.churn``: documents updated or deleted) reaches
``compact_churn_fraction`` of the live documents and at least ``compact_min_churn``. An interrupted
compaction leaves the half-built generation marked as building; the next one continues it.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memsync.chroma import collections as stores
from memsync.chroma.server import chroma_cli
from memsync.config.settings import Settings
from memsync.worker.process import logs
from memsync.worker.process.memory import release_responses
from memsync.worker.rows.state import ACTIVE_COLLECTION, SyncState
from memsync.worker.stores.vectorcopy import drop_copy, open_writer

PAGE = 1000  # documents per get/upsert: a few MB of vectors and metadata
_SEGMENT_DIR = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True)
class CompactResult:
    """What a compaction did."""

    old: str
    new: str | None
    copied: int
    churn: int
    seconds: float
    interrupted: bool = False

    def line(self) -> str:
        """One line for people."""
        if self.interrupted:
            return f"compaction of {self.old} interrupted after {self.copied} documents (the next run continues)"
        return f"compacted {self.old} -> {self.new}: {self.copied} documents copied, {self.churn} dead dropped"


def due(settings: Settings, state: SyncState, collection: str) -> bool:
    """Whether the churn of ``collection`` calls for a compaction."""
    if settings.compact_churn_fraction <= 0:
        return False
    churn = state.churn(collection)
    return churn >= settings.compact_min_churn and churn >= settings.compact_churn_fraction * state.live_docs(
        collection)


def compact(client: Any, settings: Settings, state: SyncState, model_id: str, dimension: int,
            stop: threading.Event | None = None) -> CompactResult:
    """Copy the active generation's live vectors into a new one and switch to it (see module doc)."""
    t0 = time.perf_counter()
    stop = stop or threading.Event()
    old_col = stores.open_collection(client, settings, model_id, dimension)
    old = str(old_col.name)
    churn = state.churn(old)
    new_col = stores.begin_rebuild(client, settings, model_id, dimension, stores.generation_identity(old_col).endpoint)
    new = str(new_col.name)
    ids = state.acknowledged_ids(old)
    copied = 0
    # The new generation's vector copy is written from the same pages (it starts empty and holds
    # what the new generation holds); the old one goes with the old generation.
    copy = open_writer(settings, state, new, model_id, dimension)
    try:
        for start in range(0, len(ids), PAGE):
            if stop.is_set():
                return CompactResult(old, None, copied, churn, time.perf_counter() - t0, interrupted=True)
            page = ids[start:start + PAGE]
            got = stores.store_call("get", old_col.get, ids=page, include=["embeddings", "metadatas"])
            release_responses()
            if got["ids"]:
                stores.store_call("upsert", new_col.upsert, ids=got["ids"], embeddings=got["embeddings"],
                                  metadatas=got["metadatas"])
                if copy is not None:
                    copy.put(got["ids"], np.asarray(got["embeddings"], dtype=np.float32), got["metadatas"])
            copied += len(got["ids"])
        _drop_extras(new_col, set(ids))
        if copy is not None:
            live = set(ids)
            copy.delete([d for d in copy.doc_ids() if d not in live])
    finally:
        if copy is not None:
            copy.close()
    state.copy_records(old, new)
    state.bind_store(new, stores.collection_identity(new_col, settings), audited_at_ms=state.audited_at(old))
    stores.finish_rebuild(client, settings, new)
    state.set_meta(ACTIVE_COLLECTION, new)
    state.drop_collection(old)
    drop_copy(settings, old)
    result = CompactResult(old, new, copied, churn, time.perf_counter() - t0)
    logs.get_logger().info(logs.COMPACTED, old=old, new=new, copied=copied, churn=churn,
                           seconds=round(result.seconds, 2))
    return result


def _drop_extras(collection: Any, live: set[str]) -> None:
    """Delete documents a continued compaction copied earlier that are no longer live (rows deleted
    in between), so the new generation holds exactly what the records will say."""
    extras: list[str] = []
    offset = 0
    while True:
        got = stores.store_call("get", collection.get, include=[], limit=PAGE * 5, offset=offset)
        release_responses()
        extras.extend(i for i in got["ids"] if i not in live)
        if len(got["ids"]) < PAGE * 5:
            break
        offset += len(got["ids"])
    for start in range(0, len(extras), PAGE):
        stores.store_call("delete", collection.delete, ids=extras[start:start + PAGE])


def reclaim(chroma_dir: Path, vacuum_timeout_s: float = 600) -> int:
    """Free the space of dropped generations in a local Chroma directory whose server is stopped:
    segment directories no segment names, then ``chroma vacuum``. Returns the bytes freed."""

    def size() -> int:
        return sum(f.stat().st_size for f in chroma_dir.rglob("*") if f.is_file())

    before = size()
    db = chroma_dir / "chroma.sqlite3"
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        live = {str(r[0]) for r in conn.execute("SELECT id FROM segments")}
    finally:
        conn.close()
    for entry in chroma_dir.iterdir():
        if entry.is_dir() and _SEGMENT_DIR.fullmatch(entry.name) and entry.name not in live:
            shutil.rmtree(entry)
    subprocess.run(chroma_cli("vacuum", "--path", str(chroma_dir), "--force"), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=vacuum_timeout_s)
    freed = before - size()
    logs.get_logger().info(logs.SPACE_RECLAIMED, path=str(chroma_dir), freed_mb=round(freed / 1e6, 1))
    return freed
