"""Embedding providers without a network: the retry policy, batching and order, dimension checks,
the query cache, settings per provider, secrets, and generation identities (httpx MockTransport;
the real server process is exercised in tests/system/test_providers.py)."""

from __future__ import annotations

import email.utils
import json
from typing import Any

import httpx
import numpy as np
import pytest

from memsync.chroma import collections as stores
from memsync.config.errors import EmbeddingError, EmbeddingUnavailable, ModelMismatchError
from memsync.config.settings import LOCAL_MODEL, Settings, SettingsError, describe, load_settings
from memsync.embedding import (
    Identity,
    configured_identity,
    generation_embedder,
    key_for,
    make_embedder,
    make_reranker,
    provider_of,
)
from memsync.embedding.remote import (
    CachedEmbedder,
    Endpoint,
    EndpointConfig,
    OpenAIEmbedder,
    RerankClient,
    display_url,
    retry_after_s,
)

KEY = "sk-test-very-secret-0123456789"


class Fake:
    """A scripted endpoint: each request takes the next answer (status, headers, body); records requests."""

    def __init__(self, answers: list[tuple[int, dict[str, str], Any]] | None = None, dim: int = 8) -> None:
        self.answers = list(answers or [])
        self.requests: list[dict[str, Any]] = []
        self.headers: list[httpx.Headers] = []
        self.dim = dim

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        self.headers.append(request.headers)
        if self.answers:
            status, headers, payload = self.answers.pop(0)
            if status != 200 or payload is not None:
                return httpx.Response(status, headers=headers, json=payload)
        texts = body["input"]
        data = [{"index": i, "embedding": [float(len(t) + 1)] + [1.0] * (self.dim - 1)} for i, t in enumerate(texts)]
        return httpx.Response(200, json={"data": list(reversed(data))})


def endpoint(fake: Fake, waits: list[float] | None = None, retries: int = 3, **kw: Any) -> Endpoint:
    def wait(s: float) -> bool:
        (waits if waits is not None else []).append(s)
        return False

    return Endpoint(EndpointConfig("http://127.0.0.1:9/v1", KEY, timeout_s=1.0, max_retries=retries, **kw),
                    wait=wait, transport=httpx.MockTransport(fake))


class TestRetries:
    def test_retry_after_in_seconds_or_http_date(self) -> None:
        assert retry_after_s("3") == 3.0 and retry_after_s("0.5") == 0.5
        date = email.utils.formatdate(1_000_010.0, usegmt=True)
        assert retry_after_s(date, now=1_000_000.0) == pytest.approx(10.0)
        assert retry_after_s(None) is None and retry_after_s("soon") is None

    def test_429_waits_what_retry_after_asks_then_succeeds(self) -> None:
        fake = Fake([(429, {"Retry-After": "2"}, {"error": "slow down"}), (503, {}, {"error": "busy"})])
        waits: list[float] = []
        vectors = OpenAIEmbedder(endpoint(fake, waits), "m", dimension=8).embed(["a"])
        assert vectors.shape == (1, 8) and len(fake.requests) == 3
        assert waits[0] == 2.0 and 0.5 <= waits[1] <= 1.0  # Retry-After, then the 2nd backoff (1 s, jitter)

    def test_retry_after_is_capped(self) -> None:
        waits: list[float] = []
        fake = Fake([(429, {"Retry-After": "3600"}, {})])
        OpenAIEmbedder(endpoint(fake, waits, backoff_cap_s=5.0), "m", dimension=8).embed(["a"])
        assert waits == [5.0]

    def test_persistent_5xx_is_unavailable_after_the_retries(self) -> None:
        fake = Fake([(500, {}, {"error": "boom"})] * 10)
        with pytest.raises(EmbeddingUnavailable, match="unavailable after 3 tries: HTTP 500"):
            OpenAIEmbedder(endpoint(fake, retries=2), "m", dimension=8).embed(["a"])
        assert len(fake.requests) == 3

    def test_timeouts_and_refused_connections_are_unavailable(self) -> None:
        def timeout(request: httpx.Request) -> httpx.Response:
            raise httpx.ReadTimeout("slow", request=request)

        ep = Endpoint(EndpointConfig("http://127.0.0.1:9/v1", None, 0.5, 1), wait=lambda s: False,
                      transport=httpx.MockTransport(timeout))
        with pytest.raises(EmbeddingUnavailable, match="no answer within 0.5 s"):
            ep.post("/embeddings", {}, "embeddings")
        refused = Endpoint(EndpointConfig(f"http://127.0.0.1:{_closed_port()}/v1", None, 1.0, 0))
        with pytest.raises(EmbeddingUnavailable, match="cannot connect"):
            refused.post("/embeddings", {}, "embeddings")

    def test_a_stop_ends_the_backoff(self) -> None:
        fake = Fake([(500, {}, {})] * 5)
        ep = Endpoint(EndpointConfig("http://x/v1", None, 1.0, 5), wait=lambda s: True,
                      transport=httpx.MockTransport(fake))
        with pytest.raises(EmbeddingUnavailable, match="stopped while retrying"):
            ep.post("/embeddings", {}, "embeddings")
        assert len(fake.requests) == 1

    @pytest.mark.parametrize(("status", "fix"), [(401, "check the key"), (404, "embedding_base_url"),
                                                 (400, "embedding_model")])
    def test_other_4xx_is_a_configuration_error_without_the_key(self, status: int, fix: str) -> None:
        fake = Fake([(status, {}, {"error": {"message": f"Incorrect API key provided: {KEY}"}})])
        with pytest.raises(EmbeddingError) as info:
            OpenAIEmbedder(endpoint(fake), "m", dimension=8).embed(["a"])
        message = str(info.value)
        assert fix in message and f"HTTP {status}" in message and "\n" not in message
        assert KEY not in message and len(fake.requests) == 1  # no retry of a refusal
        assert fake.headers[0]["authorization"] == f"Bearer {KEY}"
        assert KEY not in repr(EndpointConfig("u", KEY))

    def test_display_url_drops_credentials(self) -> None:
        assert display_url("https://user:pw@host.example:8443/v1?k=1") == "https://host.example:8443/v1"


def _closed_port() -> int:
    from tests.conftest import free_port

    return free_port()


class TestOpenAIEmbedder:
    def test_batches_keep_order_and_are_normalised(self) -> None:
        fake = Fake(dim=4)
        texts = ["a", "bb", "", "dddd", "eeeee"]
        vectors = OpenAIEmbedder(endpoint(fake), "m", batch_size=2, dimension=4).embed(texts)
        assert [len(r["input"]) for r in fake.requests] == [2, 2, 1]
        assert fake.requests[1]["input"][0] == " "  # empty input is refused by OpenAI: a space instead
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        firsts = vectors[:, 0] / vectors[:, 1]  # reversed answers put back by index: first component = len + 1
        assert np.allclose(firsts, [2, 3, 2, 5, 6])

    def test_dimension_is_probed_once_then_checked(self) -> None:
        fake = Fake(dim=6)
        emb = OpenAIEmbedder(endpoint(fake), "m")
        assert emb.dimension == 6 and emb.model_id == "openai:m" and len(fake.requests) == 1
        emb.embed(["x"])
        fake.dim = 5
        with pytest.raises(EmbeddingError, match="dimension 5 .* expected 6.*resync --rebuild"):
            emb.embed(["x"])

    def test_wrong_count_of_vectors_is_unavailable(self) -> None:
        fake = Fake([(200, {}, {"data": [{"index": 0, "embedding": [1.0] * 8}]})])
        with pytest.raises(EmbeddingUnavailable, match="unreadable answer"):
            OpenAIEmbedder(endpoint(fake), "m", dimension=8).embed(["a", "b"])

    def test_query_cache_answers_repeats_and_evicts_the_oldest(self) -> None:
        fake = Fake()
        cached = CachedEmbedder(OpenAIEmbedder(endpoint(fake), "m", dimension=8), size=2)
        first = cached.embed(["q1"])
        assert np.array_equal(cached.embed(["q1"]), first) and len(fake.requests) == 1
        cached.embed(["q2"])
        cached.embed(["q3"])  # evicts q1
        cached.embed(["q1"])
        assert len(fake.requests) == 4

    def test_rerank_client_orders_by_score(self) -> None:
        def answer(request: httpx.Request) -> httpx.Response:
            body = json.loads(request.content)
            assert body["top_n"] == 3 and body["query"] == "q"
            return httpx.Response(200, json={"results": [{"index": 2, "relevance_score": 0.9},
                                                         {"index": 0, "relevance_score": 0.1},
                                                         {"index": 7, "relevance_score": 0.5}]})

        ep = Endpoint(EndpointConfig("http://x/v1", None, 1.0, 0), transport=httpx.MockTransport(answer))
        assert RerankClient(ep, "r").rerank("q", ["a", "b", "c"]) == [(2, 0.9), (0, 0.1)]


class TestSettings:
    def test_local_allows_only_the_bundled_model(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("MEMSYNC_EMBEDDING_MODEL", "nomic-embed-text")
        with pytest.raises(SettingsError) as info:
            load_settings()
        message = str(info.value)
        assert "embedding_model" in message and LOCAL_MODEL in message and "embedding_provider=openai" in message

    def test_openai_defaults_and_free_form_model(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("MEMSYNC_EMBEDDING_PROVIDER", "openai")
        s = load_settings().settings
        assert (s.embedding_model, s.embedding_base_url) == ("text-embedding-3-small", "https://api.openai.com/v1")
        monkeypatch.setenv("MEMSYNC_EMBEDDING_MODEL", "nomic-embed-text")
        monkeypatch.setenv("MEMSYNC_EMBEDDING_BASE_URL", "http://127.0.0.1:11434/v1/")
        s = load_settings().settings
        assert (s.embedding_model, s.embedding_base_url) == ("nomic-embed-text", "http://127.0.0.1:11434/v1")
        assert configured_identity(s) == Identity("openai", "openai:nomic-embed-text", None,
                                                  "http://127.0.0.1:11434/v1")

    def test_openai_api_key_goes_to_openai_only(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("MEMSYNC_EMBEDDING_PROVIDER", "openai")
        loaded = load_settings()
        assert loaded.settings.embedding_api_key is not None
        assert loaded.settings.embedding_api_key.get_secret_value() == KEY
        assert loaded.origins["embedding_api_key"] == "env:OPENAI_API_KEY"
        monkeypatch.setenv("MEMSYNC_EMBEDDING_BASE_URL", "http://127.0.0.1:11434/v1")
        assert load_settings().settings.embedding_api_key is None  # never sent to another server
        monkeypatch.setenv("MEMSYNC_EMBEDDING_API_KEY", "mine")
        s = load_settings().settings
        assert s.embedding_api_key is not None and s.embedding_api_key.get_secret_value() == "mine"

    def test_each_key_goes_only_to_its_own_server(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("MEMSYNC_EMBEDDING_PROVIDER", "openai")
        monkeypatch.setenv("MEMSYNC_RERANK_PROVIDER", "openai")
        monkeypatch.setenv("MEMSYNC_RERANK_MODEL", "bge-reranker")
        monkeypatch.setenv("MEMSYNC_RERANK_BASE_URL", "http://127.0.0.1:8012/v1")
        s = load_settings().settings
        assert key_for(s, "https://api.openai.com/v1") == KEY
        reranker = make_reranker(s)
        assert reranker is not None and reranker.endpoint.config.api_key is None  # not OpenAI's key
        monkeypatch.setenv("MEMSYNC_RERANK_API_KEY", "rerank-key")
        reranker = make_reranker(load_settings().settings)
        assert reranker is not None and reranker.endpoint.config.api_key == "rerank-key"
        # Switched to Ollama, a generation recorded at OpenAI still gets OpenAI's key (and only it).
        monkeypatch.setenv("MEMSYNC_EMBEDDING_BASE_URL", "http://127.0.0.1:11434/v1")
        monkeypatch.setenv("MEMSYNC_EMBEDDING_API_KEY", "ollama-key")
        s = load_settings().settings
        assert key_for(s, "https://api.openai.com/v1") == KEY
        assert key_for(s, "http://127.0.0.1:11434/v1") == "ollama-key"
        assert key_for(s, "http://127.0.0.1:8012/v1") is None  # same host, another server

    def test_secrets_print_as_set_or_unset(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("MEMSYNC_EMBEDDING_API_KEY", KEY)
        rows = {r["key"]: r for r in describe(load_settings())}
        assert rows["embedding_api_key"]["value"] == "set"
        assert rows["rerank_api_key"]["value"] == "unset" and rows["api_token"]["value"] == "unset"
        assert KEY not in json.dumps([r["value"] for r in rows.values()], default=str)

    def test_rerank_needs_a_model(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("MEMSYNC_RERANK_PROVIDER", "openai")
        with pytest.raises(SettingsError, match="rerank_model"):
            load_settings()


class TestIdentity:
    def test_generations_without_a_provider_key_read_as_local(self, settings: Settings, chroma: Any) -> None:
        old = chroma.create_collection("old-g1", embedding_function=None,
                                       metadata={stores.MODEL_KEY: LOCAL_MODEL, stores.DIM_KEY: 384})
        assert stores.generation_identity(old) == Identity("local", LOCAL_MODEL, 384, None)
        assert provider_of("openai:text-embedding-3-small") == "openai" and provider_of(LOCAL_MODEL) == "local"

    def test_a_writer_with_another_model_is_told_the_fix(self, settings: Settings, chroma: Any) -> None:
        stores.open_collection(chroma, settings, LOCAL_MODEL, 384)
        with pytest.raises(ModelMismatchError) as info:
            stores.open_collection(chroma, settings, "openai:nomic-embed-text", 768, "http://h:1/v1")
        message = str(info.value)
        assert "local model 'all-MiniLM-L6-v2-int8' (dimension 384)" in message
        assert "openai model 'nomic-embed-text' (dimension 768)" in message
        assert "memsync resync --rebuild" in message and "embedding_provider=local" in message

    def test_rebuild_records_provider_and_endpoint(self, settings: Settings, chroma: Any) -> None:
        stores.open_collection(chroma, settings, LOCAL_MODEL, 384)
        new = stores.begin_rebuild(chroma, settings, "openai:m", 8, "http://127.0.0.1:9/v1")
        assert stores.generation_identity(new) == Identity("openai", "openai:m", 8, "http://127.0.0.1:9/v1")

    def test_query_embedder_follows_the_recorded_identity(self, settings: Settings) -> None:
        recorded = Identity("openai", "openai:old-model", 8, "http://old.example/v1")
        s = settings.model_copy(update={"embedding_provider": "openai", "embedding_model": "new-model",
                                        "embedding_base_url": "http://new.example/v1", "search_timeout_ms": 700})
        emb = generation_embedder(s, recorded)
        assert isinstance(emb, CachedEmbedder)
        assert emb.model_id == "openai:old-model" and emb.dimension == 8  # no probe: recorded
        assert emb.inner.endpoint.url == "http://old.example/v1"  # the model's own endpoint
        assert emb.inner.endpoint.config.max_retries == 0 and emb.inner.endpoint.config.timeout_s == 0.7
        assert make_embedder(settings).model_id == LOCAL_MODEL
        with pytest.raises(EmbeddingError, match="unknown embedding provider"):
            generation_embedder(s, Identity("vertex", "vertex:x", 8))
