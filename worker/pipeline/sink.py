"""The vector sink: Chroma writes, behind a narrow Protocol so sync logic can be tested with fakes.
A :class:`MirroredSink` applies each write to the local vector copy too, behind the same Protocol.

Upsert only (so a retried batch is harmless): deterministic ids, batches no larger than the server's
``get_max_batch_size()``, no document text stored in memsync's own collection (search hydrates rows
from SQLite, and storing text halves Chroma's insert rate; the upstream-readable store, which
claude-mem reads, keeps its texts). chromadb errors are translated here: connection problems
become StoreUnavailable (retry later), rejected input becomes RejectedBatch (a row problem).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from memsync.chroma.collections import server_failed
from memsync.config.errors import BadData, MemsyncError, StoreDamaged, StoreUnavailable
from memsync.config.native import guarded
from memsync.worker.process import logs
from memsync.worker.process.memory import release_responses
from memsync.worker.stores.vectorcopy import VectorCopyWriter


class RejectedBatch(BadData):
    """Chroma refused the data itself (not the connection); retrying the same data will fail again."""


class VectorSink(Protocol):
    """What sync needs from the vector store."""

    @property
    def name(self) -> str: ...

    def upsert(
        self, ids: Sequence[str], embeddings: npt.NDArray[np.float32], metadatas: Sequence[dict[str, Any]],
        documents: Sequence[str] | None = None,
    ) -> None: ...

    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[dict[str, Any]]) -> None: ...

    def delete(self, ids: Sequence[str]) -> None: ...

    def count(self) -> int: ...

    def iter_metadata(self, page: int = 5000) -> Iterator[tuple[str, dict[str, Any]]]: ...


def _chunks(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, start + size)


READS = frozenset({"count", "get"})  # calls that write nothing: an internal error on them is damage


def _translate(what: str, exc: Exception, collection: str) -> Exception:
    import httpx
    from chromadb.errors import InvalidArgumentError

    if isinstance(exc, (InvalidArgumentError, ValueError, TypeError)) and not isinstance(exc, httpx.HTTPError):
        return RejectedBatch(f"Chroma rejected {what}: {exc}")
    if what in READS and server_failed(exc):
        # The server answered (a connection problem is another class) and failed to read the
        # collection: a segment it cannot load (a disk that filled up mid-write leaves one). Every
        # later call fails the same way, so retrying is no cure: re-derive it.
        return StoreDamaged(f"Chroma cannot read collection {collection} ({what}: {str(exc)[:200]})", collection)
    return StoreUnavailable(f"Chroma {what} failed: {exc}")


class ChromaSink:
    """A Chroma collection as a VectorSink."""

    def __init__(self, collection: Any, max_batch: int | None = None) -> None:
        self._col = collection
        limit = max_batch
        if limit is None:
            # The collection's client knows the server's limit (5,461 on chromadb 1.5.9); callers
            # that hold the client pass client.get_max_batch_size() instead.
            try:
                limit = int(collection._client.get_max_batch_size())
            except Exception:
                limit = 5000
        self._max_batch = max(1, limit)

    @property
    def name(self) -> str:
        """The collection (generation) name."""
        return str(self._col.name)

    @property
    def collection(self) -> Any:
        """The Chroma collection written to."""
        return self._col

    def _call(self, what: str, fn: Any, **kwargs: Any) -> Any:
        try:
            with guarded(f"Chroma {what}", StoreUnavailable):  # a panic in Chroma's native code
                return fn(**kwargs)
        except MemsyncError:  # already ours: a StoreRefused from a 401/403 (chroma.collections)
            raise
        except Exception as exc:
            raise _translate(what, exc, self.name) from exc

    def upsert(
        self, ids: Sequence[str], embeddings: npt.NDArray[np.float32], metadatas: Sequence[dict[str, Any]],
        documents: Sequence[str] | None = None,
    ) -> None:
        """Insert or replace documents: vectors and metadata, and their texts when ``documents`` are
        given (memsync's own collection keeps none; the upstream-readable store does)."""
        for sl in _chunks(len(ids), self._max_batch):
            texts = {} if documents is None else {"documents": list(documents[sl])}
            self._call("upsert", self._col.upsert, ids=list(ids[sl]), embeddings=embeddings[sl],
                       metadatas=list(metadatas[sl]), **texts)

    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[dict[str, Any]]) -> None:
        """Replace metadata of existing documents without re-embedding (keys set to None are removed)."""
        for sl in _chunks(len(ids), self._max_batch):
            self._call("update", self._col.update, ids=list(ids[sl]), metadatas=list(metadatas[sl]))

    def delete(self, ids: Sequence[str]) -> None:
        """Delete documents by id (absent ids are ignored by Chroma)."""
        for sl in _chunks(len(ids), self._max_batch):
            self._call("delete", self._col.delete, ids=list(ids[sl]))

    def count(self) -> int:
        """Number of vectors in the collection."""
        return int(self._call("count", self._col.count))

    def pages(self, include: list[str], page: int = 5000) -> Iterator[dict[str, Any]]:
        """The collection's ``get`` results, ``page`` documents at a time, with ``include``."""
        offset = 0
        size = min(page, self._max_batch)
        while True:
            got = self._call("get", self._col.get, include=include, limit=size, offset=offset)
            release_responses()
            yield got
            if len(got["ids"]) < size:
                return
            offset += len(got["ids"])

    def iter_metadata(self, page: int = 5000) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every (id, metadata) in the collection, paged."""
        for got in self.pages(["metadatas"], page):
            ids = got["ids"]
            for doc_id, meta in zip(ids, got["metadatas"] or [{}] * len(ids), strict=False):
                yield doc_id, dict(meta or {})


class MirroredSink:
    """A sink whose writes also reach the local vector copy (``worker.stores.vectorcopy``), each after the
    store acknowledged it. A copy that cannot be written is declared incomplete and left alone for
    the rest of the sink's life (searches then use Chroma, and the worker fills it again later);
    ``on_drop`` is told, once, so its owner can close it."""

    def __init__(self, primary: ChromaSink, copy: VectorCopyWriter | None,
                 on_drop: Callable[[], None] | None = None) -> None:
        self.primary = primary
        self._copy = copy
        self._on_drop = on_drop
        self._log = logs.get_logger(collection=primary.name)

    @property
    def name(self) -> str:
        """The collection (generation) name."""
        return self.primary.name

    @property
    def copy(self) -> VectorCopyWriter | None:
        """The copy written beside the store (None: there is none, or a write to it failed)."""
        return self._copy

    def _mirror(self, op: str, write: Callable[[VectorCopyWriter], None]) -> None:
        if self._copy is None:
            return
        try:
            write(self._copy)
        except (OSError, ValueError) as exc:
            self._log.warning(logs.VECTOR_COPY_FAILED, op=op, error=str(exc)[:200])
            self._copy.invalidate()
            self._copy = None
            if self._on_drop is not None:
                self._on_drop()

    def upsert(
        self, ids: Sequence[str], embeddings: npt.NDArray[np.float32], metadatas: Sequence[dict[str, Any]],
        documents: Sequence[str] | None = None,
    ) -> None:
        """Upsert into the store, then put the same vectors into the copy."""
        self.primary.upsert(ids, embeddings, metadatas, documents)
        self._mirror("put", lambda copy: copy.put(ids, embeddings, metadatas))

    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[dict[str, Any]]) -> None:
        """New metadata in the store, then in the copy."""
        self.primary.update_metadata(ids, metadatas)
        self._mirror("relabel", lambda copy: copy.relabel(ids, metadatas))

    def delete(self, ids: Sequence[str]) -> None:
        """Delete from the store, then from the copy."""
        self.primary.delete(ids)
        self._mirror("delete", lambda copy: copy.delete(ids))

    def count(self) -> int:
        """Number of vectors in the store."""
        return self.primary.count()

    def iter_metadata(self, page: int = 5000) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every (id, metadata) in the store, paged."""
        return self.primary.iter_metadata(page)
