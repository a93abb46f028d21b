"""Chroma: the one place that opens a client and a collection (one process owns a store).

Modes: ``embedded`` (PersistentClient under an exclusive lock of the data dir), ``http`` (any
server), ``managed`` (the data dir's own ``chroma run``, see chroma_server).

Collections. ``settings.collection`` names a *pointer*: an empty collection whose metadata says
which generation (``<name>-g<N>``) is active. A rebuild fills a new generation while search keeps
using the old one, then flips the pointer and drops the old generation. Each generation records
the embedding provider, model id, dimension and (remote providers) endpoint; a generation made
before providers existed has no provider key and reads as ``local``. Writing to it with another
model is a ModelMismatchError that names ``memsync resync --rebuild``; a search embeds with the
recorded identity instead (:func:`generation_identity`).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
from dataclasses import dataclass
from typing import IO, Any

import httpx

from memsync.chroma.remote import (
    REFUSED_STATUSES,
    Endpoint,
    check_access,
    endpoint,
    refused,
    tls_failure,
)
from memsync.chroma.server import ManagedServer, heartbeat_failure, live_server
from memsync.config.errors import ConfigError, ModelMismatchError, StoreUnavailable
from memsync.config.settings import HTTP_DEFAULT_PORT, Settings, generation_number
from memsync.embedding import Identity, provider_of

ACTIVE_KEY = "memsync:active"
BUILDING_KEY = "memsync:building"
MODEL_KEY = "memsync:model"
DIM_KEY = "memsync:dimension"
PROVIDER_KEY = "memsync:provider"
ENDPOINT_KEY = "memsync:endpoint"
EMBEDDED_LOCK = "chroma-embedded.lock"


@dataclass
class ChromaHandle:
    """An open Chroma client plus what must be released when done (lock, managed server)."""

    client: Any
    mode: str
    server: ManagedServer | None = None
    lock: IO[str] | None = None

    def close(self) -> None:
        """Close the client (its HTTP session or in-process system), release the embedded lock, and
        stop a managed server this handle started."""
        if self.client is not None and self.mode == "embedded":
            with contextlib.suppress(Exception):
                self.client.close()  # releases the in-process system (and its files)
        # HTTP clients are shared per server for the life of the process (see _http_client).
        self.client = None
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.lock is not None:
            fcntl.flock(self.lock, fcntl.LOCK_UN)
            self.lock.close()
            self.lock = None

    def __enter__(self) -> ChromaHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _chroma_settings(ep: Endpoint | None = None) -> Any:
    from chromadb.config import Settings as ChromaSettings

    settings = ChromaSettings(anonymized_telemetry=False, allow_reset=False)
    if ep is not None and ep.ssl and ep.ca_file:
        # chromadb hands this to httpx as ``verify``; its settings type says bool | str, but a str
        # is deprecated in httpx 0.28 (a DeprecationWarning per client), so the context is set
        # after validation.
        settings.__dict__["chroma_server_ssl_verify"] = ep.verify()
    return settings


_http_clients: dict[Endpoint, Any] = {}


def _http_client(ep: Endpoint, timeout_s: float, probe_timeout_s: float | None = None) -> Any:
    """One client per server (and credentials, tenant, database) per process, reused across
    reconnects: its connection pool reconnects after a server restart, and chromadb 1.5.9 offers
    no way to close all the sockets a client opens (closing and re-creating clients leaks them).
    The heartbeat comes first (within ``probe_timeout_s``, default min(timeout_s, 5)), so a refused
    port costs no chromadb import; a remote endpoint's credentials, tenant and database are checked
    before chromadb's own check, which would call a refused token a missing tenant."""
    probe = min(timeout_s, 5.0) if probe_timeout_s is None else probe_timeout_s
    failure = heartbeat_failure(ep.host, ep.port, timeout_s=probe, endpoint=ep)
    if failure:
        raise StoreUnavailable(f"Chroma server not reachable at {ep.host}:{ep.port}: {failure}")
    if ep in _http_clients:
        return _http_clients[ep]
    if ep != Endpoint(ep.host, ep.port):
        check_access(ep, timeout_s)
    import chromadb

    try:
        client = chromadb.HttpClient(host=ep.host, port=ep.port, ssl=ep.ssl, headers=ep.header_dict(),
                                     settings=_chroma_settings(ep), tenant=ep.tenant, database=ep.database)
    except Exception as exc:  # chromadb raises plain exceptions for connection problems
        raise tls_failure(ep, exc) or StoreUnavailable(f"Chroma server at {ep.describe()}: {exc}") from exc
    # chromadb 1.5.9 builds its httpx client with timeout=None; every call must have a timeout.
    session = getattr(getattr(client, "_server", None), "_session", None)
    if isinstance(session, httpx.Client):
        session.timeout = httpx.Timeout(timeout_s)
        # Credentials revoked after the client was made: every call answered 401/403 becomes a
        # StoreRefused naming the settings, not chromadb's bare exception with the response text.
        session.event_hooks["response"] = [functools.partial(_refuse, ep)]
    _http_clients[ep] = client
    return client


def _refuse(ep: Endpoint, response: httpx.Response) -> None:
    if response.status_code in REFUSED_STATUSES:
        raise refused(ep, response.status_code)


def _embedded_lock(settings: Settings) -> IO[str]:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    info = live_server(settings)
    if info is not None:
        raise ConfigError(
            f"a managed Chroma server (pid {info.pid}) owns {settings.chroma_dir}; "
            "use chroma_mode=managed or stop it first"
        )
    fh = open(settings.data_dir / EMBEDDED_LOCK, "a+")  # noqa: SIM115 - held for the handle's lifetime
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        raise ConfigError(
            f"another process holds the embedded Chroma store in {settings.chroma_dir}; "
            "embedded mode is single-process (use chroma_mode=managed)"
        ) from None
    return fh


def connect(settings: Settings, server: ManagedServer | None = None) -> ChromaHandle:
    """Open Chroma in the configured mode. Close the handle (or use ``with``) when done.

    In managed mode a long-lived caller (the worker) passes its own ``server`` to keep supervising
    it; the handle then leaves stopping it to that caller."""
    mode = settings.chroma_mode
    if mode == "embedded":
        import chromadb

        lock = _embedded_lock(settings)
        try:
            settings.chroma_dir.mkdir(parents=True, exist_ok=True)
            client = chromadb.PersistentClient(path=str(settings.chroma_dir), settings=_chroma_settings())
        except Exception:
            fcntl.flock(lock, fcntl.LOCK_UN)
            lock.close()
            raise
        return ChromaHandle(client=client, mode=mode, lock=lock)
    if mode == "http":
        port = settings.chroma_port or HTTP_DEFAULT_PORT
        ep = endpoint(settings, settings.chroma_host, port)
        return ChromaHandle(client=_http_client(ep, settings.chroma_timeout_s), mode=mode)
    owned = server is None
    server = server or ManagedServer(settings)
    info = server.ensure()
    try:
        client = _http_client(Endpoint(info.host, info.port), settings.chroma_timeout_s)
    except Exception:
        if owned:
            server.stop()
        raise
    return ChromaHandle(client=client, mode=mode, server=server if owned else None)


def reader_address(settings: Settings) -> tuple[str, int] | None:
    """The server a reader talks to, without starting anything: http mode's configured one, managed
    mode's running server on its recorded port, or found in the process table when the record is
    damaged or missing (StoreUnavailable at once when none runs); None in embedded mode."""
    if settings.chroma_mode == "embedded":
        return None
    if settings.chroma_mode == "http":
        return settings.chroma_host, settings.chroma_port or HTTP_DEFAULT_PORT
    info = live_server(settings)
    if info is None:
        raise StoreUnavailable(f"no managed Chroma server running for {settings.data_dir} (is `memsync worker` up?)")
    return info.host, info.port


def reader_endpoint(settings: Settings) -> Endpoint | None:
    """:func:`reader_address` as an :class:`Endpoint` (http mode: with TLS, credentials, tenant
    and database); None in embedded mode."""
    address = reader_address(settings)
    return None if address is None else endpoint(settings, *address)


def check_remote(settings: Settings, timeout_s: float) -> None:
    """http mode: StoreRefused when the server refuses memsync's credentials or has no such tenant
    or database, StoreUnavailable when it does not answer within ``timeout_s`` (per request);
    nothing to check in other modes. For a command that would otherwise only degrade (a search
    answers lexically and says why)."""
    if settings.chroma_mode != "http":
        return
    ep = reader_endpoint(settings)
    assert ep is not None
    failure = heartbeat_failure(ep.host, ep.port, timeout_s, endpoint=ep)
    if failure:
        raise StoreUnavailable(f"Chroma server not reachable at {ep.host}:{ep.port}: {failure}")
    check_access(ep, timeout_s)


def connect_reader(settings: Settings, probe_timeout_s: float | None = None) -> ChromaHandle:
    """Open Chroma for reading without starting anything (see :func:`reader_address`; embedded
    mode as :func:`connect`). ``probe_timeout_s`` bounds the first heartbeat (a search passes its
    deadline); a refused port fails at once."""
    ep = reader_endpoint(settings)
    if ep is None:
        return connect(settings)
    client = _http_client(ep, settings.chroma_timeout_s, probe_timeout_s)
    return ChromaHandle(client=client, mode=settings.chroma_mode)


def _pointer(client: Any, name: str) -> Any:
    return client.get_or_create_collection(name, embedding_function=None)


def generation_name(base: str, generation: int) -> str:
    """The collection name of generation N."""
    return f"{base}-g{generation}"


def generation_identity(collection: Any) -> Identity:
    """What made a generation's vectors, from its metadata (no provider key: the bundled model's)."""
    meta = collection.metadata or {}
    recorded = str(meta.get(MODEL_KEY) or "")
    dim = meta.get(DIM_KEY)
    endpoint = meta.get(ENDPOINT_KEY)
    return Identity(str(meta.get(PROVIDER_KEY) or provider_of(recorded)), recorded,
                    int(dim) if isinstance(dim, int) else None, str(endpoint) if endpoint else None)


def _check_identity(collection: Any, model_id: str, dimension: int) -> None:
    recorded = generation_identity(collection)
    if recorded.model_id != model_id or recorded.dimension != dimension:
        wanted = Identity(provider_of(model_id), model_id, dimension)
        raise ModelMismatchError(
            f"collection {collection.name} holds vectors of {recorded.describe()}, but the configured "
            f"embedding is {wanted.describe()}; run `memsync resync --rebuild` to re-embed into a new "
            f"generation (searches keep using this one until it is done), or set embedding_provider="
            f"{recorded.provider} and embedding_model={recorded.model} back"
        )


def _create_generation(client: Any, name: str, model_id: str, dimension: int, endpoint: str | None = None) -> Any:
    meta: dict[str, Any] = {MODEL_KEY: model_id, DIM_KEY: dimension, PROVIDER_KEY: provider_of(model_id)}
    if endpoint:
        meta[ENDPOINT_KEY] = endpoint
    return client.get_or_create_collection(
        name,
        embedding_function=None,
        metadata=meta,
        configuration={"hnsw": {"space": "cosine"}},
    )


def server_failed(exc: BaseException) -> bool:
    """True when Chroma answered a call with its internal error (HTTP 500, or the embedded
    engine's equivalent): not a connection problem and not bad input. On a read, that is a
    collection it cannot load (``StoreDamaged``); on a write, often a full disk."""
    from chromadb.errors import InternalError

    return isinstance(exc, InternalError)


def store_call(what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with chromadb's failures as StoreUnavailable naming ``what``."""
    try:
        return fn(*args, **kwargs)
    except (ConfigError, StoreUnavailable):
        raise
    except Exception as exc:
        raise StoreUnavailable(f"Chroma {what} failed: {exc}") from exc


def open_collection(client: Any, settings: Settings, model_id: str, dimension: int,
                    endpoint: str | None = None) -> Any:
    """The active generation for ``settings.collection`` (created on first use, recording
    ``endpoint`` for a remote provider), identity-checked."""
    pointer = store_call("open collection", _pointer, client, settings.collection)
    meta = dict(pointer.metadata or {})
    active = meta.get(ACTIVE_KEY)
    if not active:
        active = generation_name(settings.collection, 1)
        collection = store_call("create collection", _create_generation, client, active, model_id, dimension,
                                endpoint)
        store_call("update pointer", pointer.modify, metadata={**meta, ACTIVE_KEY: active})
        return collection
    collection = store_call("open collection", client.get_collection, active, embedding_function=None)
    _check_identity(collection, model_id, dimension)
    return collection


def store_location(settings: Settings) -> str:
    """Where the configured Chroma keeps its collections: the server (http) or the directory."""
    if settings.chroma_mode == "http":  # unchanged for plain HTTP and the default tenant and database
        return endpoint(settings, settings.chroma_host, settings.chroma_port).describe()
    return str(settings.chroma_dir.resolve())


def collection_identity(collection: Any, settings: Settings) -> str:
    """The identity of a collection as it exists now: Chroma's id (new whenever the collection is
    created again, e.g. after its store was wiped) at the store's location. Sync records describe
    the collection of one identity (``worker.pipeline.target``)."""
    return f"{collection.id}@{store_location(settings)}"


def open_active(client: Any, settings: Settings, model_id: str | None = None, dimension: int | None = None) -> Any:
    """The active generation for reading (never created here), identity-checked when ``model_id``
    is given (a search reads the identity instead: :func:`generation_identity`); raises
    StoreUnavailable when nothing was synced yet."""
    name = active_collection_name(client, settings)
    if not name:
        raise StoreUnavailable(f"collection {settings.collection!r} has no synced vectors yet")
    collection = store_call("open collection", client.get_collection, name, embedding_function=None)
    if model_id is not None and dimension is not None:
        _check_identity(collection, model_id, dimension)
    return collection


def active_collection_name(client: Any, settings: Settings) -> str | None:
    """The name of the active generation, or None when nothing was synced yet."""
    pointer = store_call("open collection", _pointer, client, settings.collection)
    value = (pointer.metadata or {}).get(ACTIVE_KEY)
    return str(value) if value else None


def begin_rebuild(client: Any, settings: Settings, model_id: str, dimension: int, endpoint: str | None = None) -> Any:
    """The generation being rebuilt: the unfinished one from an interrupted rebuild, else a new one
    (recording the identity, as :func:`open_collection`)."""
    pointer = store_call("open collection", _pointer, client, settings.collection)
    meta = dict(pointer.metadata or {})
    building = meta.get(BUILDING_KEY)
    if building:
        existing = store_call("open collection", client.get_collection, building, embedding_function=None)
        if (existing.metadata or {}).get(MODEL_KEY) == model_id and (existing.metadata or {}).get(DIM_KEY) == dimension:
            return existing
        store_call("drop collection", client.delete_collection, building)
    names = [c if isinstance(c, str) else c.name for c in store_call("list collections", client.list_collections)]
    gens = [g for n in names if (g := generation_number(settings.collection, n)) is not None]
    name = generation_name(settings.collection, max(gens, default=0) + 1)
    collection = store_call("create collection", _create_generation, client, name, model_id, dimension, endpoint)
    store_call("update pointer", pointer.modify, metadata={**meta, BUILDING_KEY: name})
    return collection


def finish_rebuild(client: Any, settings: Settings, built: str) -> str | None:
    """Flip the pointer to ``built`` and drop the previous generation; returns the dropped name."""
    pointer = store_call("open collection", _pointer, client, settings.collection)
    meta = dict(pointer.metadata or {})
    old = meta.get(ACTIVE_KEY)
    meta[ACTIVE_KEY] = built
    meta.pop(BUILDING_KEY, None)
    # modify() replaces the whole metadata dict (checked on chromadb 1.5.9), so the key is gone.
    store_call("update pointer", pointer.modify, metadata=meta)
    if old and old != built:
        with contextlib.suppress(Exception):
            client.delete_collection(old)
        return str(old)
    return None


def recreate_damaged(client: Any, settings: Settings, name: str, model_id: str, dimension: int,
                     endpoint: str | None = None) -> None:
    """Drop collection ``name``, which Chroma can no longer read (StoreDamaged), and create it again
    empty: a generation with its identity, the upstream-readable store as :func:`open_upstream`
    makes it. The new collection has a new id, so the records are aligned with it (all lost) and
    the next full pass re-derives it from the database (its vectors mostly from the embedding
    store). Raises StoreUnavailable when Chroma refuses."""
    store_call("drop collection", client.delete_collection, name)
    if name == settings.upstream_collection:
        open_upstream(client, name)
    else:
        store_call("create collection", _create_generation, client, name, model_id, dimension, endpoint)


def open_upstream(client: Any, name: str) -> Any:
    """The upstream-readable store's collection, created when missing exactly as claude-mem's
    chroma-mcp 0.2.x creates it (``chroma_create_collection``: a configuration naming Chroma's
    default embedding function, nothing else), so claude-mem's own ``query_texts`` embed with the
    model whose vectors memsync writes (all-MiniLM-L6-v2). Returned without an embedding function:
    memsync always passes vectors, and Chroma's default function would download its model (making
    the function loads nothing; it fetches its model at its first call, never made here)."""
    from chromadb.api.collection_configuration import CreateCollectionConfiguration
    from chromadb.utils.embedding_functions import DefaultEmbeddingFunction

    config = CreateCollectionConfiguration(embedding_function=DefaultEmbeddingFunction())
    store_call("create collection", client.get_or_create_collection, name, configuration=config)
    return store_call("open collection", client.get_collection, name, embedding_function=None)
