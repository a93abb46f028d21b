"""The embedding store (layout and reasons: ``config.formats.embedding_store``): what a sync pass
asks before it embeds, and the garbage collection that keeps it as small as the documents.

- :class:`EmbeddingStore`: the SQLite file. Lookups and writes are short transactions in WAL mode,
  so the worker and a ``resync`` share it; a failure is logged and costs only an embedding (a
  lookup answers nothing, a write is skipped), and a file SQLite cannot read is replaced by an
  empty one: nothing here can make a sync wrong or stop it.
- :class:`BatchVectors`: the vectors of one sync batch, a chunk at a time. Each distinct text is
  embedded at most once, and not at all when the store holds its vector; new vectors are stored
  right after they are embedded, before Chroma sees them (write-ahead is safe: a vector is a pure function of
  (model, text), so no crash can leave a wrong one under a key).
- :func:`collect_garbage`: removes the vectors whose text no sync record of any generation names
  any more (rows edited or deleted, a generation dropped after a rebuild to another model). Run by
  the worker when idle after a full pass that updated or deleted documents (and after its first),
  and at the end of a resync that did, or of any rebuild.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memsync.config.formats.embedding_store import DDL, decode, encode, hash_key, roundtrip, store_path
from memsync.config.inlists import chunks
from memsync.config.settings import Settings
from memsync.embedding import Embedder, embed_bound_s, vector_identity, waits_on
from memsync.worker.process import logs
from memsync.worker.rows.documents import Document
from memsync.worker.rows.state import SyncState, open_wal

# A vector is stored a moment before its sync record is written (by this process or a resync
# beside it): a collection keeps unreferenced vectors younger than this, so it never removes one
# whose record is on its way.
GC_GRACE_S = 600


@dataclass(frozen=True, slots=True)
class Collected:
    """What one garbage collection did."""

    removed: int
    kept: int
    seconds: float
    file_bytes: int


class EmbeddingStore:
    """``DATA_DIR/embeddings.db``: vectors by (embedding identity, text hash). Thread-safe."""

    def __init__(self, path: Path, busy_timeout_ms: int = 5000) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.busy_timeout_s = busy_timeout_ms / 1000
        self.log = logs.get_logger(component="embedding_store")
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        try:
            self._conn = self._open()
        except sqlite3.DatabaseError as exc:
            self._replace_damaged(exc)

    @classmethod
    def open(cls, settings: Settings) -> EmbeddingStore | None:
        """The data directory's store, or None when ``embedding_store`` is off."""
        return cls(store_path(settings), settings.sqlite_busy_timeout_ms) if settings.embedding_store else None

    def _open(self) -> sqlite3.Connection:
        return open_wal(self.path, DDL, self.busy_timeout_s)

    def _replace_damaged(self, exc: sqlite3.DatabaseError) -> None:
        """Not a database (overwritten, truncated): every vector in it can be embedded again, so it
        is replaced by an empty store. Locked or read-only is not damage: the store stays off."""
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None
        if isinstance(exc, sqlite3.OperationalError):
            self.log.warning(logs.EMBEDDING_STORE_FAILED, op="open", error=str(exc)[:200])
            return
        self.log.warning(logs.EMBEDDING_STORE_DAMAGED, path=str(self.path), error=str(exc)[:200])
        for suffix in ("", "-wal", "-shm"):
            self.path.with_name(self.path.name + suffix).unlink(missing_ok=True)
        try:
            self._conn = self._open()
        except sqlite3.Error as again:
            self.log.warning(logs.EMBEDDING_STORE_FAILED, op="open", error=str(again)[:200])

    @contextlib.contextmanager
    def _using(self, op: str) -> Iterator[sqlite3.Connection | None]:
        """The connection under the lock (None when the store is unusable). An SQLite error is
        logged and swallowed: the caller's fallback (embed, skip the write) cannot affect
        correctness. A damaged file is replaced."""
        with self._lock:
            if self._conn is None:
                yield None
                return
            try:
                yield self._conn
            except sqlite3.DatabaseError as exc:
                if self._conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self._conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.OperationalError):  # locked, disk full: try again next time
                    self.log.warning(logs.EMBEDDING_STORE_FAILED, op=op, error=str(exc)[:200])
                else:
                    self._replace_damaged(exc)

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> EmbeddingStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- lookups and writes --------------------------------------------------------------------

    def model(self, identity: str, model_id: str) -> int | None:
        """The store's number for an embedding identity (created on first use); ``model_id`` is
        the id the sync records name (``docs.model``). None when the store is unusable."""
        with self._using("model") as conn:
            if conn is None:
                return None
            conn.execute("INSERT OR IGNORE INTO models(identity, model) VALUES (?, ?)", (identity, model_id))
            row = conn.execute("SELECT id FROM models WHERE identity = ?", (identity,)).fetchone()
            return int(row[0])
        return None

    def held(self, model: int, text_hashes: Iterable[str]) -> set[str]:
        """The text hashes the store has an entry for (read from the key index alone)."""
        with self._using("held") as conn:
            if conn is None:
                return set()
            return {bytes(key).hex() for key, in _select(conn, "text_hash", model, text_hashes)}
        return set()

    def get(self, model: int, text_hashes: Iterable[str], dim: int) -> dict[str, npt.NDArray[np.float32]]:
        """Stored vectors by text hash; entries that cannot be trusted (wrong length, checksum) are
        left out, so their texts are embedded again and overwritten."""
        found: dict[str, npt.NDArray[np.float32]] = {}
        bad = 0
        with self._using("get") as conn:
            if conn is None:
                return found
            for key, blob in _select(conn, "text_hash, vec", model, text_hashes):
                vector = decode(blob, dim)
                if vector is None:
                    bad += 1
                else:
                    found[bytes(key).hex()] = vector
        if bad:
            self.log.warning(logs.EMBEDDING_STORE_BAD_ENTRIES, entries=bad, model=model)
        return found

    def put(self, model: int, items: Sequence[tuple[str, npt.NDArray[np.float32]]], now_s: int | None = None) -> None:
        """Store vectors by text hash (replacing what was there: a bad entry is overwritten)."""
        if not items:
            return
        added = int(time.time()) if now_s is None else now_s
        rows = [(model, hash_key(h), added, encode(v)) for h, v in items]
        with self._using("put") as conn:
            if conn is None:
                return
            with conn:
                conn.execute("BEGIN")
                conn.executemany("INSERT OR REPLACE INTO vectors(model, text_hash, added_s, vec) VALUES (?,?,?,?)",
                                 rows)

    # -- size and collection -------------------------------------------------------------------

    def count(self) -> int:
        """Vectors stored (all identities)."""
        with self._using("count") as conn:
            if conn is None:
                return 0
            return int(conn.execute("SELECT COUNT(*) FROM vectors").fetchone()[0])
        return 0

    def file_bytes(self) -> int:
        """Bytes of the store on disk (the database file and its WAL)."""
        return sum(p.stat().st_size for p in (self.path, self.path.with_name(self.path.name + "-wal")) if p.exists())

    def collect(self, live: Iterable[tuple[str, str]], now_s: int | None = None, grace_s: int = GC_GRACE_S) -> int:
        """Remove the vectors whose (model id, text hash) is not in ``live`` (what the sync records
        name), except those stored less than ``grace_s`` ago; give the freed pages back to the
        file system. Returns how many were removed (0 when the store is unusable)."""
        cutoff = (int(time.time()) if now_s is None else now_s) - grace_s
        with self._using("collect") as conn:
            if conn is None:
                return 0
            # The referenced keys go into a temporary table first (outside the write transaction,
            # which then lasts one DELETE), streamed: no set of every hash in Python's memory.
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS live(text_hash BLOB, model TEXT, "
                         "PRIMARY KEY (text_hash, model)) WITHOUT ROWID")
            with conn:  # one transaction of the private temporary database: no lock on the store
                conn.execute("BEGIN")
                conn.execute("DELETE FROM temp.live")
                conn.executemany("INSERT OR IGNORE INTO temp.live(text_hash, model) VALUES (?, ?)", _keys(live))
            with conn:
                conn.execute("BEGIN IMMEDIATE")
                removed = conn.execute(
                    "DELETE FROM vectors WHERE added_s < ? AND NOT EXISTS (SELECT 1 FROM temp.live l JOIN models m "
                    "ON m.model = l.model WHERE m.id = vectors.model AND l.text_hash = vectors.text_hash)",
                    (cutoff,)).rowcount
            conn.execute("DELETE FROM temp.live")
            if removed:
                conn.executescript("PRAGMA incremental_vacuum;")  # to the end (execute() frees one page)
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return int(removed)
        return 0


def _select(conn: sqlite3.Connection, columns: str, model: int, text_hashes: Iterable[str]) -> Iterator[Any]:
    """Rows of ``columns`` of the entries of these text hashes, one ``IN`` list per SELECT."""
    for part in chunks(list(text_hashes)):
        keys = [hash_key(h) for h in part]
        marks = ",".join("?" * len(keys))
        yield from conn.execute(f"SELECT {columns} FROM vectors WHERE model = ? AND text_hash IN ({marks})",
                                [model, *keys])


def _keys(live: Iterable[tuple[str, str]]) -> Iterator[tuple[bytes, str]]:
    """(key bytes, model id) of well-formed text hashes (a record's hash is hex; anything else
    names no stored vector)."""
    for model_id, text_hash in live:
        with contextlib.suppress(ValueError):
            yield hash_key(text_hash), model_id


def collect_garbage(store: EmbeddingStore, state: SyncState, now_s: int | None = None,
                    grace_s: int | None = None) -> Collected:
    """One garbage collection of ``store`` against every sync record in ``state`` (every
    generation: the active one, one being built, one being replaced); ``grace_s`` defaults to
    :data:`GC_GRACE_S`."""
    t0 = time.perf_counter()
    removed = store.collect(state.text_hashes(), now_s, GC_GRACE_S if grace_s is None else grace_s)
    result = Collected(removed, store.count(), time.perf_counter() - t0, store.file_bytes())
    store.log.info(logs.EMBEDDING_STORE_COLLECTED, removed=result.removed, kept=result.kept,
                   seconds=round(result.seconds, 3), file_bytes=result.file_bytes)
    return result


# Told what a call waits on and the longest it can take, around each model call: the worker keeps
# its heartbeat fresh meanwhile (worker.loop.health.Health.busy).
Busy = Callable[[str, float], contextlib.AbstractContextManager[None]]


class BatchVectors:
    """The vectors of one sync batch, chunk by chunk: from the store (an identical text embedded in
    an earlier chunk is there too), or embedded now, each distinct text once. Only one chunk's
    vectors are held at a time (a remote model's may be 12 KB each). Without a store: every
    document embedded, as before the store existed."""

    def __init__(self, embedder: Embedder, store: EmbeddingStore | None, model: int | None,
                 busy: Busy | None = None) -> None:
        self.embedder = embedder
        self._busy = busy
        self.store = store if model is not None else None
        self.model = model if model is not None else 0
        self.embedded = 0  # texts embedded
        self.reused = 0  # documents written without embedding anything for them
        self.embed_s = 0.0
        self.store_s = 0.0
        self._held: set[str] = set()  # text hashes the store held when the batch was ordered

    def order(self, docs: Sequence[Document]) -> list[Document]:
        """``docs`` in the order to write them: those whose texts the store holds first (their
        chunks cost no embedding), then by text length, since the model's cost follows the longest
        text of a call (chunks of similar length pad less)."""
        held: set[str] = set()
        if self.store is not None and docs:
            t = time.perf_counter()
            held = self.store.held(self.model, {d.text_hash for d in docs})
            self.store_s += time.perf_counter() - t
        self._held = held
        return sorted(docs, key=lambda d: (d.text_hash not in held, len(d.text)))

    def cost(self, doc: Document) -> int:
        """What embedding ``doc`` costs, in characters the model reads: none when the store held its
        text when the batch was ordered."""
        return 0 if doc.text_hash in self._held else len(doc.text)

    def vectors(self, chunk: Sequence[Document]) -> npt.NDArray[np.float32]:
        """The vectors of ``chunk``, in order: texts the store does not hold (or holds a bad entry
        of) are embedded, once each, and stored before they are returned."""
        if self.store is None:
            t = time.perf_counter()
            out = self._embed([d.text for d in chunk])
            self.embed_s += time.perf_counter() - t
            self.embedded += len(chunk)
            return out
        t = time.perf_counter()
        known = self.store.get(self.model, {d.text_hash for d in chunk}, self.embedder.dimension)
        self.store_s += time.perf_counter() - t
        missing: dict[str, str] = {}
        for d in chunk:
            if d.text_hash not in known:
                missing.setdefault(d.text_hash, d.text)
        if missing:
            t = time.perf_counter()
            # Stored at float16 and used at that precision here too: a document's vector is the
            # same whether it was just embedded or read back by a later rebuild.
            fresh = roundtrip(self._embed(list(missing.values())))
            self.embed_s += time.perf_counter() - t
            self.embedded += len(missing)
            items = list(zip(missing, fresh, strict=True))
            t = time.perf_counter()
            self.store.put(self.model, items)
            self.store_s += time.perf_counter() - t
            known.update(items)
        self.reused += len(chunk) - len(missing)
        return np.stack([known[d.text_hash] for d in chunk]) if chunk else \
            np.zeros((0, self.embedder.dimension), np.float32)


    def _embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        """One model call, its wait announced to ``busy`` (the worker's heartbeat)."""
        if self._busy is None:
            return self.embedder.embed(texts)
        with self._busy(waits_on(self.embedder), embed_bound_s(self.embedder, len(texts))):
            return self.embedder.embed(texts)


def store_model(store: EmbeddingStore | None, embedder: Embedder) -> int | None:
    """``embedder``'s number in ``store`` (None without a usable store)."""
    return store.model(vector_identity(embedder), embedder.model_id) if store is not None else None
