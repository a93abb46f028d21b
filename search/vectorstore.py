"""Reading the vector store (Chroma): the query embedded by the model that made the active
generation, the nearest documents collapsed onto their rows by (kind, id), every call under a deadline.

The query is embedded with the active generation's *recorded* provider and model
(``embedding.generation_embedder``), not the configured one: during ``memsync resync
--rebuild`` to another model, searches keep answering (hybrid) from the old generation, and move to
the new one when the pointer flips (checked at most every ``GENERATION_TTL_S``). A remote endpoint
that cannot embed the query (down, slow, refusing) is a :class:`VectorUnavailable` like Chroma down,
retried after ``RETRY_AFTER_S``; its reason names the fix when the settings name another model.

Chroma is reached without starting anything (``stores.connect_reader``); a search that finds it
down, slow, erroring or empty raises :class:`VectorUnavailable` with a reason, and the engine
answers from the lexical side alone instead. No recorded managed server, or a port that refuses,
fails at once (:func:`probe` checks that much without the embedding model or chromadb); a server
that accepts but does not answer gets ``search_timeout_ms``, for connecting as for each call. A
failed connection is retried at most every few seconds, so a server that is down costs each query
nothing but a check of the clock; a broken connection is dropped whole, so a server restarted on
another port is found from its record. Which query
answers a search (top-N, by id, ``where``, or the local vector copy) is decided in
``search.semantic``.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt

from memsync.chroma import collections as stores
from memsync.chroma.server import heartbeat_failure
from memsync.config.claude_mem.schema import Kind
from memsync.config.docids import DocIdError, parse_doc_id
from memsync.config.errors import ConfigError, EmbeddingError, EmbeddingUnavailable, MemsyncError, StoreUnavailable
from memsync.config.formats.worker_status import worker_state
from memsync.config.native import guarded
from memsync.config.settings import Settings
from memsync.embedding import Embedder, Identity, configured_identity, generation_embedder

RETRY_AFTER_S = 3.0
ID_CHUNK = 8000  # ids per existence check: 35k ids cost ~640 ms in chunks of 2,000, ~240 ms in 8,000
COUNT_TTL_S = 5.0
GENERATION_TTL_S = 2.0  # how often an open store checks which generation is active (one small call)


class VectorUnavailable(MemsyncError, RuntimeError):
    """The vector store cannot answer this query; the message is the reason shown to callers."""


def probe(settings: Settings) -> None:
    """Raise VectorUnavailable when no Chroma server can answer: in managed mode none is recorded
    (or its process is gone), or its port refuses; both at once. A server that accepts but does not
    answer costs ``search_timeout_ms``. No embedding model and no chromadb import: a caller can run
    it before loading those. Nothing to check in embedded mode."""
    try:
        ep = stores.reader_endpoint(settings)
        if ep is None:
            return
        failure = heartbeat_failure(ep.host, ep.port, timeout_s=settings.search_timeout_ms / 1000, endpoint=ep)
    except (StoreUnavailable, ConfigError) as exc:  # ConfigError: StoreRefused, credentials or certificate
        raise VectorUnavailable(str(exc)) from exc
    if failure:
        raise VectorUnavailable(f"Chroma server not reachable at {ep.host}:{ep.port}: {failure}")


@dataclass(frozen=True, slots=True)
class RowHit:
    """The best document of one row: its cosine similarity and field."""

    kind: Kind
    id: int
    similarity: float
    field: str | None


def empty_store_reason(data_dir: Path) -> str:
    """Why an empty store cannot answer, from what the worker last said (``worker.json``): nothing
    synced yet, or a store that lost the documents the sync records hold (being repaired, or not)."""
    worker = worker_state(data_dir, int(time.time() * 1000))
    records = worker.get("records_documents")
    if not isinstance(records, int) or records <= 0:
        return "the vector store is empty (nothing synced yet)"
    repair = ("the worker is repairing it" if worker["up"]
              else "start `memsync worker` or run `memsync resync` to repair it")
    return f"the vector store holds 0 of {records:,} documents; {repair}"


def collapse(ids: Sequence[str], distances: Sequence[float]) -> list[RowHit]:
    """Field documents → rows, best first; a row's similarity is its best document's (cosine
    distance → similarity). Keys are (kind, id), never the id alone."""
    best: dict[tuple[Kind, int], RowHit] = {}
    for doc_id, dist in zip(ids, distances, strict=True):
        try:
            key = parse_doc_id(doc_id)
        except DocIdError:
            continue
        row = (key.kind, key.sqlite_id)
        sim = max(0.0, min(1.0, 1.0 - float(dist)))
        if row not in best or sim > best[row].similarity:
            best[row] = RowHit(key.kind, key.sqlite_id, sim, key.field)
    return sorted(best.values(), key=lambda h: -h.similarity)


class VectorStore:
    """The Chroma collection of the active generation, one per engine: lazily connected,
    thread-safe, with a per-query deadline."""

    def __init__(self, settings: Settings, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self._fixed = embedder  # a caller's own embedder (tests, benchmarks): identity-checked instead
        self._embedder: Embedder | None = embedder
        self._identity: Identity | None = None
        self._embed_failed_at, self._embed_failure = 0.0, ""
        self._checked_at = 0.0
        self._lock = threading.Lock()
        self._collection: Any = None
        self._handle: stores.ChromaHandle | None = None
        self._failed_at = 0.0
        self._failure = ""
        self._count_value: int | None = 0
        self._count_at = -1e9
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="memsync-vector")

    def close(self) -> None:
        """Release the worker threads (a call stuck past its deadline is abandoned)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            if self._handle is not None:
                self._handle.close()
            self._handle, self._collection = None, None

    @property
    def embedder(self) -> Embedder:
        """The embedder of the active generation (connecting if needed)."""
        self._open()
        assert self._embedder is not None
        return self._embedder

    def _open(self) -> Any:
        with self._lock:
            if self._collection is not None and not self._generation_changed():
                return self._collection
            if self._failed_at and time.monotonic() - self._failed_at < RETRY_AFTER_S:
                raise VectorUnavailable(self._failure)
            try:
                with guarded("Chroma", StoreUnavailable):
                    if self._handle is None:
                        self._handle = stores.connect_reader(self.settings,
                                                             probe_timeout_s=self.settings.search_timeout_ms / 1000)
                    if self._fixed is not None:
                        collection = stores.open_active(self._handle.client, self.settings, self._fixed.model_id,
                                                        self._fixed.dimension)
                    else:
                        collection = stores.open_active(self._handle.client, self.settings)
                        self._use_identity(stores.generation_identity(collection), str(collection.name))
                self._collection, self._checked_at = collection, time.monotonic()
                self._failed_at = 0.0
                return self._collection
            except (StoreUnavailable, ConfigError) as exc:
                self._fail_open(str(exc))
                raise VectorUnavailable(str(exc)) from exc
            except Exception as exc:  # chromadb raises plain exceptions for transport problems
                self._fail_open(f"Chroma error: {exc}")
                raise VectorUnavailable(self._failure) from exc

    def _generation_changed(self) -> bool:
        """Whether the pointer moved to another generation (a rebuild or compaction switched);
        asked at most every GENERATION_TTL_S. A failure to ask is left to the next real call."""
        now = time.monotonic()
        if now - self._checked_at < GENERATION_TTL_S or self._handle is None:
            return False
        self._checked_at = now
        try:
            with guarded("Chroma", StoreUnavailable):
                active = stores.active_collection_name(self._handle.client, self.settings)
        except StoreUnavailable:
            return False
        if active == self._collection.name:
            return False
        self._collection = None
        return True

    def _use_identity(self, identity: Identity, generation: str) -> None:
        """Embed queries as ``generation``'s vectors were made (EmbeddingError: VectorUnavailable
        with the fix)."""
        if identity == self._identity and self._embedder is not None:
            return
        try:
            self._embedder = generation_embedder(self.settings, identity)
        except EmbeddingError as exc:
            raise VectorUnavailable(self._explain(identity, generation, str(exc))) from exc
        self._identity = identity
        self._embed_failed_at = 0.0

    def _explain(self, identity: Identity, generation: str, error: str) -> str:
        """Why the query cannot be embedded, and, when the settings name another model than the
        active generation's, what to do about it."""
        reason = f"cannot embed the query with {identity.describe()}: {error}"
        configured = configured_identity(self.settings)
        if configured.model_id != identity.model_id:
            reason += (f"; the active generation {generation} was built with it, the settings name "
                       f"{configured.describe()}: run `memsync resync --rebuild` to switch to that, or set "
                       f"embedding_provider={identity.provider} and embedding_model={identity.model} back")
        return reason

    def _fail_open(self, reason: str) -> None:
        """Remember the failure (retried after RETRY_AFTER_S) and drop the connection: the next try
        reads the server's record again (it may have been restarted on another port)."""
        self._failed_at, self._failure = time.monotonic(), reason
        if self._handle is not None:
            self._handle.close()
        self._handle = None

    def _call(self, what: str, fn: Any, **kwargs: Any) -> Any:
        collection = self._open()
        future = self._pool.submit(getattr(collection, fn), **kwargs)
        try:
            with guarded(f"Chroma {what}", StoreUnavailable):  # a panic of Chroma's native code, re-raised here
                return future.result(timeout=self.settings.search_timeout_ms / 1000)
        except concurrent.futures.TimeoutError:
            raise VectorUnavailable(f"Chroma {what} exceeded {self.settings.search_timeout_ms} ms") from None
        except StoreUnavailable as exc:
            raise VectorUnavailable(str(exc)) from exc
        except Exception as exc:
            if isinstance(exc, (httpx.TransportError, ConnectionError, OSError)):
                with self._lock:  # reconnect later: the server may be restarting or replaced (on another port)
                    self._collection = None
                    self._fail_open(f"Chroma {what} failed: {exc}")
            # Other errors concern this request only; the next query tries again.
            if stores.server_failed(exc):  # the server answered and could not read: say the cure
                raise VectorUnavailable(f"Chroma cannot read the collection ({what}: {str(exc)[:160]}); the worker "
                                        "recreates it, or run `memsync resync`") from exc
            raise VectorUnavailable(f"Chroma {what} failed: {exc}") from exc

    def ensure(self) -> None:
        """Raise VectorUnavailable now (before embedding the query) when the store is not reachable."""
        self._open()

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        """The query's unit vector, by the active generation's model. An endpoint that failed is not
        asked again for RETRY_AFTER_S (a down endpoint then costs a query nothing)."""
        embedder = self.embedder
        if self._embed_failed_at and time.monotonic() - self._embed_failed_at < RETRY_AFTER_S:
            raise VectorUnavailable(self._embed_failure)
        try:
            vec: npt.NDArray[np.float32] = embedder.embed([text])[0]
        except (EmbeddingUnavailable, EmbeddingError) as exc:
            identity = self._identity or Identity("local", embedder.model_id)
            self._embed_failure = self._explain(identity, str(self._collection.name if self._collection else "?"),
                                                str(exc))
            self._embed_failed_at = time.monotonic()
            raise VectorUnavailable(self._embed_failure) from exc
        self._embed_failed_at = 0.0
        return vec

    def nearest(self, vector: npt.NDArray[np.float32], n: int, ids: list[str] | None = None,
                where: dict[str, Any] | None = None, verified: bool = False) -> list[RowHit]:
        """The rows of the ``n`` nearest documents (optionally among ``ids`` or matching ``where``).
        ``verified``: the ids are known to exist (else they are checked first)."""
        return self.nearest_docs(vector, n, ids, where, verified)[0]

    def collection_name(self) -> str:
        """The name of the active generation (connecting if needed)."""
        return str(self._open().name)

    def nearest_docs(self, vector: npt.NDArray[np.float32], n: int, ids: list[str] | None = None,
                     where: dict[str, Any] | None = None, verified: bool = False) -> tuple[list[RowHit], bool]:
        """Like :meth:`nearest`, plus whether the store had fewer than ``n`` documents to offer
        (then the answer is exhaustive: no row beyond it exists)."""
        kwargs: dict[str, Any] = {"query_embeddings": [vector.tolist()], "n_results": max(1, n),
                                  "include": ["distances"]}
        if ids is not None:
            # A restricted query fails on ids the store does not have ("Error finding id"), and a
            # row's possible ids are a superset: ask which exist first.
            ids = ids if verified else self._existing(ids)
            if not ids:
                return [], True
            kwargs["ids"] = ids
            kwargs["n_results"] = max(1, min(n, len(ids)))
        if where:
            kwargs["where"] = where
        got = self._call("query", "query", **kwargs)
        if not got["ids"] or not got["ids"][0]:
            if ids is None and where is None:
                count = self._call("count", "count")
                if not count:
                    raise VectorUnavailable(empty_store_reason(self.settings.data_dir))
            return [], True
        docs = got["ids"][0]
        if ids is not None:
            return collapse(docs, got["distances"][0]), True
        # Fewer documents than asked is not proof of the end: Chroma's HNSW search returns at most
        # about its ef_search candidates (177 of 500 asked, measured at 313k documents). Only a
        # store that holds no more than was asked is exhausted.
        exhaustive = len(docs) < kwargs["n_results"] and self._holds_at_most(kwargs["n_results"])
        return collapse(docs, got["distances"][0]), exhaustive

    def _holds_at_most(self, n: int) -> bool:
        """Whether the store holds no more than ``n`` documents; False when its count fails.
        Trigger: the count is past the deadline (a server's first count loads its segments: over
        1.5 s at 313k documents) or fails. Why: the query itself answered, and "not exhausted" is
        the safe answer (the caller looks deeper or exactly), where raising would send the whole
        search to the lexical fallback. Outcome: this search is slower, not worse."""
        count = self._count()
        return count is not None and count <= n

    def _count(self) -> int | None:
        """The store's document count, asked at most once per ``COUNT_TTL_S`` whether it answered
        or not; None when that ask failed or passed the deadline. Why remember a failure: a count
        past the deadline still runs in a thread of the pool, and asking again on every search
        would fill the pool with them until the queries themselves wait past theirs."""
        now = time.monotonic()
        if now - self._count_at > COUNT_TTL_S:
            self._count_at = now
            try:
                self._count_value = int(self._call("count", "count"))
            except VectorUnavailable:
                self._count_value = None
        return self._count_value

    def _existing(self, ids: list[str]) -> list[str]:
        """The ids the store has, asked in chunks (Chroma's own SQLite limits bound variables)."""
        out: list[str] = []
        for i in range(0, len(ids), ID_CHUNK):
            out.extend(self._call("get", "get", ids=ids[i:i + ID_CHUNK], include=[])["ids"])
        return out

    def vectors(self, doc_ids: list[str]) -> dict[str, npt.NDArray[np.float32]]:
        """Stored vectors of the given documents (missing ones are absent)."""
        got = self._call("get", "get", ids=doc_ids, include=["embeddings"])
        embs = got.get("embeddings")
        if embs is None:
            return {}
        return {i: np.asarray(e, dtype=np.float32) for i, e in zip(got["ids"], embs, strict=True)}
