"""The Chroma side of the worker loop: the connection (a managed server adopted or started, or
``http``/``embedded``), the active generation's sink and its local vector copy.

Opened lazily by the loop before each step and closed when Chroma fails (the next step connects
again, and in managed mode restarts a server that died); the copy writer outlives a reconnect as
long as the active generation stays the same.

**Records bound to their store** (:func:`check_store`): the sync records say what one collection
holds, so they are bound to its identity (Chroma's collection id, which is new whenever the
collection is created again, at the store's location). The records are aligned with what the
store really holds (:func:`align_records`, a read of every id with its ``content_hash``) when the
identity differs (a store deleted, wiped, restored, or another server), when the store's count
differs from the records' count (checked at every reconcile and health check, and before every
resync), and every ``store_audit_interval_s`` (a loss that keeps the count). The next full pass
then re-drives exactly the rows whose records changed: it embeds what the store lost, updates
what differs and deletes what no row implies; every other document is left alone.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Any

from memsync.chroma import collections as stores
from memsync.chroma.server import ManagedServer
from memsync.config.claude_mem.schema import Kind
from memsync.config.diskspace import low_on_space, no_space_at
from memsync.config.docids import DocIdError, parse_doc_id
from memsync.config.errors import ModelMismatchError, StoreDamaged, StoreUnavailable
from memsync.config.settings import Settings
from memsync.embedding import (
    Embedder,
    EmbeddingError,
    close_embedder,
    configured_identity,
    endpoint_url,
    generation_writer,
)
from memsync.embedding.remote import Wait
from memsync.worker.pipeline.sink import ChromaSink, VectorSink
from memsync.worker.pipeline.upstream import UpstreamSink, bind_format
from memsync.worker.process import logs
from memsync.worker.rows.state import ACTIVE_COLLECTION, HeldIds, SyncState, now_ms
from memsync.worker.stores.vectorcopy import VectorCopyWriter, open_writer

ALIGN_PAGE = 5000  # ids (with metadata) read per call while aligning


@dataclass(frozen=True, slots=True)
class AlignResult:
    """What an alignment of the records with the store found (and corrected), in documents."""

    store_documents: int  # ids the store holds
    lost: int = 0  # acknowledged records of documents the store does not hold: forgotten
    adopted: int = 0  # store documents without an acknowledged record: recorded with the store's hash
    rehashed: int = 0  # records whose hash differed from the store's: the store's taken
    foreign: int = 0  # store ids that are no memsync document id: deleted
    rows: int = 0  # row records forgotten (the next full pass derives these rows again)
    copy_removed: int = 0  # vector copy entries of documents the store does not hold: removed
    seconds: float = 0.0

    @property
    def changed(self) -> int:
        """Records corrected (0: the records already said exactly what the store holds)."""
        return self.lost + self.adopted + self.rehashed + self.foreign


@dataclass(frozen=True, slots=True)
class StoreCheck:
    """One check of a collection against its records (``worker.json`` reports it)."""

    store_documents: int  # the collection's count when checked
    records_documents: int  # the records' acknowledged documents when checked (before any alignment)
    read_at_ms: int
    reason: str | None = None  # why an alignment ran: identity, count, audit; None: none ran
    aligned: AlignResult | None = None

    @property
    def repaired(self) -> bool:
        """An alignment ran and corrected records (a full pass must follow)."""
        return self.aligned is not None and self.aligned.changed > 0


def align_records(state: SyncState, sink: VectorSink, copy: VectorCopyWriter | None, model: str,
                  page: int = ALIGN_PAGE) -> AlignResult:
    """Make the records of ``sink``'s collection say exactly what it holds (ids and content
    hashes), forgetting the row records of every row concerned, and make the vector copy hold no
    document the store lacks. Nothing is embedded here; the next full pass re-drives those rows.
    The store's ids are listed on disk and compared there (:class:`HeldIds`): what is held in memory
    is what differs (every id only when the records or the store were lost). Records written
    after their page was listed (a resync beside it) count as lost and are written again."""
    t0 = time.perf_counter()
    name = sink.name
    with state.held_ids() as held:
        listed: list[tuple[str, str]] = []
        for doc_id, meta in sink.iter_metadata(page):
            listed.append((doc_id, str(meta.get("content_hash") or "")))
            if len(listed) >= page:
                held.add(listed)
                listed = []
        held.add(listed)
        adopt: list[tuple[str, Kind, int, str]] = []
        foreign: list[str] = []
        rows: set[tuple[Kind, int]] = set()
        rehashed = 0
        for doc_id, content_hash, known in held.differing(name):
            try:
                parsed = parse_doc_id(doc_id)
            except DocIdError:
                foreign.append(doc_id)  # no row can ever claim it
                continue
            rehashed += known is not None
            adopt.append((doc_id, parsed.kind, parsed.sqlite_id, content_hash))
            rows.add((parsed.kind, parsed.sqlite_id))
        lost = held.lost(name)
        for doc_id in lost:
            with contextlib.suppress(DocIdError):
                parsed = parse_doc_id(doc_id)
                rows.add((parsed.kind, parsed.sqlite_id))
        if foreign:
            sink.delete(foreign)
            held.discard(foreign)
        copy_removed = _align_copy(copy, held, page)
        store_documents = len(held)
    if lost:
        state.forget_docs(name, lost)
    if adopt:
        state.adopt_docs(name, adopt, model)
    if rows:
        state.forget_row_records(name, sorted(rows, key=lambda r: (r[0].value, r[1])))
    return AlignResult(store_documents=store_documents, lost=len(lost), adopted=len(adopt) - rehashed,
                       rehashed=rehashed, foreign=len(foreign), rows=len(rows), copy_removed=copy_removed,
                       seconds=time.perf_counter() - t0)


def _align_copy(copy: VectorCopyWriter | None, held: HeldIds, page: int) -> int:
    """Remove copy entries of documents the store does not hold; a complete copy that lacks some
    of the store's documents is declared incomplete (filled from the store later). Returns the
    entries removed."""
    if copy is None:
        return 0
    try:
        copied = 0
        extra: list[str] = []
        for ids in copy.doc_id_chunks(page):
            copied += len(ids)
            extra += held.absent(ids)
        if extra:
            copy.delete(sorted(extra))
        if copy.complete and copied - len(extra) < len(held):  # the copy's ids are distinct
            copy.invalidate()
        return len(extra)
    except (OSError, ValueError) as exc:
        logs.get_logger().warning(logs.VECTOR_COPY_FAILED, op="align", error=str(exc)[:200])
        copy.invalidate()
        return 0


def store_counts(state: SyncState, sink: VectorSink) -> StoreCheck:
    """The collection's count and the records' count as they are now (no alignment)."""
    return StoreCheck(sink.count(), state.live_docs(sink.name), now_ms())


def check_store(settings: Settings, state: SyncState, sink: ChromaSink, copy: VectorCopyWriter | None,
                model: str, force: bool = False) -> StoreCheck:
    """The cheap check (identity, then the collection's count against the records' count), and an
    alignment by ids when it fails, when ``force``d, or when the slow audit is due."""
    name = sink.name
    identity = stores.collection_identity(sink.collection, settings)
    count = sink.count()
    live = state.live_docs(name)
    now = now_ms()
    recorded = state.store_identity(name)
    reason: str | None = None
    if recorded != identity and (recorded is not None or live or count):
        reason = "identity"
    elif count != live:
        reason = "count"
    elif force:
        reason = "requested"
    elif now - state.audited_at(name) >= settings.store_audit_interval_s * 1000:
        reason = "audit"
    if reason is None:
        if recorded != identity:
            state.bind_store(name, identity)
        return StoreCheck(count, live, now)
    result = align_records(state, sink, copy, model)
    state.bind_store(name, identity, audited_at_ms=now)
    event = logs.get_logger().warning if result.changed else logs.get_logger().info
    event(logs.STORE_ALIGNED, collection=name, reason=reason, store=count, records=live, lost=result.lost,
          adopted=result.adopted, rehashed=result.rehashed, foreign=result.foreign, rows=result.rows,
          copy_removed=result.copy_removed, seconds=round(result.seconds, 3))
    return StoreCheck(count, live, now, reason, result)


def repair_damaged(settings: Settings, client: Any, exc: StoreDamaged, model_id: str, dimension: int,
                   endpoint: str | None = None) -> None:
    """Trigger: Chroma cannot read a collection (StoreDamaged). Why: retrying never helps, and the
    collection only holds what the database implies. Outcome: a local store's collection is
    dropped and created again empty (``store_damaged``), so the records' alignment (``store_aligned``)
    and the next full pass re-derive it; raises NoSpace instead while the Chroma path's disk is
    still low (a rebuild there would fail the same way), and StoreDamaged naming
    ``resync --rebuild`` for a remote server (memsync does not drop a remote collection unasked)."""
    log = logs.get_logger()
    if settings.chroma_mode == "http":
        cure = ("run `memsync resync --rebuild` to rebuild it from the database" if exc.collection !=
                settings.upstream_collection else f"delete collection {exc.collection} on the server, then run "
                "`memsync resync`")
        log.error(logs.STORE_DAMAGED, collection=exc.collection, error=exc.problem[:300], cure=cure)
        raise StoreDamaged(exc.problem, exc.collection, cure) from exc
    if low_on_space(settings.chroma_dir, settings):
        raise no_space_at(settings.chroma_dir, settings, str(exc)) from exc
    stores.recreate_damaged(client, settings, exc.collection, model_id, dimension, endpoint)
    log.warning(logs.STORE_DAMAGED, collection=exc.collection, error=exc.problem[:300],
                action="recreated empty; re-deriving it from the database")


WARMUP_ATTEMPTS = 30  # first queries tried (each bounded by chroma_timeout_s) before giving up
WARMUP_JOIN_S = 10.0  # how long a close waits for the warm-up's query in flight


class IndexWarmup:
    """The worker's first query after it connects: the server loads a collection's vector index
    on the first query after it starts (5.5 s at 100k rows / 313k documents, ``scripts/bench_search``),
    and a search meanwhile cannot wait that long (searches without a window answer lexically; a
    window is answered by the vector copy). Asking at once moves the wait from a user's first
    search to the worker's start, and tells ``memsync status`` whether the index is still loading."""

    def __init__(self) -> None:
        self.loading_since_ms: int | None = None  # None: not loading (loaded, or not asked)
        self.loaded_in_ms: int | None = None  # how long the last load took
        self._thread: threading.Thread | None = None

    def start(self, collection: Any, dimension: int, stop: threading.Event) -> None:
        """Ask ``collection`` for one neighbour on a thread of its own (the sync goes on)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self.loading_since_ms = now_ms()
        self._thread = threading.Thread(target=self._run, args=(collection, dimension, stop),
                                        name="memsync-index-warmup", daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        """Wait for the query in flight (after ``stop`` was set): with embedded Chroma it runs in
        native code, which must not be left running while the process exits."""
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def _run(self, collection: Any, dimension: int, stop: threading.Event) -> None:
        started = self.loading_since_ms or now_ms()
        probe = [[1.0] + [0.0] * (dimension - 1)]
        for _ in range(WARMUP_ATTEMPTS):
            try:
                stores.store_call("query", collection.query, query_embeddings=probe, n_results=1,
                                  include=["distances"])
            except StoreUnavailable as exc:
                logs.get_logger(component="worker").info("index_warmup_retry", error=str(exc)[:200])
                if stop.wait(1.0):
                    break
                continue
            self.loaded_in_ms = now_ms() - started
            logs.get_logger(component="worker").info("index_loaded", seconds=round(self.loaded_in_ms / 1000, 1))
            break
        self.loading_since_ms = None


def open_upstream_sink(client: Any, settings: Settings, state: SyncState) -> UpstreamSink:
    """The upstream-readable collection (created when missing), its records on this format."""
    collection = stores.open_upstream(client, settings.upstream_collection)
    sink = UpstreamSink(collection, client.get_max_batch_size())
    if bind_format(state, sink.name):
        logs.get_logger().info("upstream_format_bound", collection=sink.name)
    return sink


class SyncTarget:
    """What the worker writes to; ``server`` is None unless ``chroma_mode`` is ``managed``. With
    ``upstream_store`` on, also the upstream-readable collection (``worker.pipeline.upstream``)."""

    def __init__(self, settings: Settings, embedder: Embedder, wait: Wait | None = None) -> None:
        self.s = settings
        self.embedder = embedder
        self._wait = wait  # a remote model's waits between retries (the worker's stop event)
        self._connected = False  # connected once: a generation switched since is followed, not refused
        self.server = ManagedServer(settings) if settings.chroma_mode == "managed" else None
        self.handle: stores.ChromaHandle | None = None
        self.sink: ChromaSink | None = None
        self.upstream: UpstreamSink | None = None  # open while connected, when upstream_store is on
        self.copy: VectorCopyWriter | None = None  # the local vector copy of the active generation
        self.warmup = IndexWarmup()

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
        try:
            collection = stores.open_collection(self.handle.client, self.s, self.embedder.model_id,
                                                self.embedder.dimension, endpoint_url(self.embedder))
        except ModelMismatchError:
            if not self._connected:
                raise  # at start: the settings name another model than the store's (fix them, or rebuild)
            collection = self._follow_rebuild(self.handle.client)
        self._connected = True
        self.sink = ChromaSink(collection, self.handle.client.get_max_batch_size())
        state.set_meta(ACTIVE_COLLECTION, self.sink.name)
        if self.s.upstream_store:
            self.upstream = open_upstream_sink(self.handle.client, self.s, state)
        if self.copy is not None and self.copy.collection != self.sink.name:
            self.close_copy()
        if self.copy is None:
            self.copy = open_writer(self.s, state, self.sink.name, self.embedder.model_id, self.embedder.dimension)
        return True

    def _follow_rebuild(self, client: Any) -> Any:
        """Trigger: the active generation is of another model than this worker's, though it was
        its own when the worker connected. Why: `memsync resync --rebuild` built a generation with
        another embedding (status suggests it for CJK text) and switched to it while the worker ran;
        exiting would stop the managed server and leave searches lexical until someone restarts
        it. Outcome: the worker embeds with the new generation's recorded identity from now on, as
        searches do (``worker_follows_generation``); ModelMismatchError naming the restart when it
        cannot (an extra not installed, an unknown provider)."""
        active = stores.open_active(client, self.s)
        identity = stores.generation_identity(active)
        try:
            embedder = generation_writer(self.s, identity, wait=self._wait)
            if identity.dimension is not None and embedder.dimension != identity.dimension:
                raise EmbeddingError(f"its vectors have dimension {embedder.dimension}, not {identity.dimension}")
        except EmbeddingError as exc:
            raise ModelMismatchError(
                f"`memsync resync --rebuild` switched collection {active.name} to {identity.describe()} while this "
                f"worker ran with {configured_identity(self.s).describe()}, and it cannot embed with the new one "
                f"({exc}); restart the worker with embedding_provider={identity.provider}"
                + (f" and embedding_model={identity.model}" if identity.provider == "openai" else "")) from exc
        logs.get_logger(component="worker").warning(
            "worker_follows_generation", collection=active.name, model=identity.model_id,
            was=self.embedder.model_id, configured=configured_identity(self.s).model_id,
            note="set the same embedding_provider in the worker's settings for its next start")
        close_embedder(self.embedder)
        self.embedder = embedder
        self.close_copy()  # the copy writer is bound to the old generation's model
        return active

    def repair(self, exc: StoreDamaged) -> None:
        """Repair the collection Chroma cannot read (:func:`repair_damaged`) and drop the
        connection, so the next open starts from the new collection."""
        if self.handle is None:
            raise exc
        try:
            repair_damaged(self.s, self.handle.client, exc, self.embedder.model_id, self.embedder.dimension,
                           endpoint_url(self.embedder))
        finally:
            self.close_store()

    def close_store(self) -> None:
        """Drop the Chroma connection (errors while closing it are ignored)."""
        if self.handle is not None:
            with contextlib.suppress(Exception):
                self.handle.close()
        self.handle, self.sink, self.upstream = None, None, None

    def reopen_copy(self, state: SyncState) -> None:
        """Open the copy writer again after it was closed (a failed write or fill), while connected."""
        if self.copy is None and self.sink is not None:
            self.copy = open_writer(self.s, state, self.sink.name, self.embedder.model_id, self.embedder.dimension)

    def close_copy(self) -> None:
        """Close the vector copy writer (a failed copy is not used again until the next open)."""
        if self.copy is not None:
            self.copy.close()
            self.copy = None

    def close(self) -> None:
        """Close everything (after the index warm-up's query in flight) and stop the managed server
        if this worker started it."""
        self.warmup.join(timeout=WARMUP_JOIN_S)
        self.close_store()
        self.close_copy()
        if self.server is not None:
            self.server.stop()

    def kill_server(self) -> None:
        """SIGTERM to the managed server this worker started, without waiting (an exit right now)."""
        if self.server is not None:
            self.server.kill_now()
