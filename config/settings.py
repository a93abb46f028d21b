"""memsync settings: the one model, the only code that reads the environment or a config file.

Precedence, highest first: command-line flags, ``MEMSYNC_*`` environment variables, the TOML
file (``--config``, else ``MEMSYNC_CONFIG``, else ``~/.memsync/config.toml`` when it exists),
then the defaults below. :func:`load_settings` also reports where each effective value came from,
for ``memsync settings``.
"""

from __future__ import annotations

import os
import re
import string
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    SecretStr,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from memsync.config.claude_mem.user_settings import DEFAULT_DIR_RULE, data_dir_choice
from memsync.config.errors import ConfigError

ENV_PREFIX = "MEMSYNC_"
DEFAULT_CONFIG_FILE = Path("~/.memsync/config.toml")

ChromaMode = Literal["managed", "http", "embedded"]
ChromaAuthHeader = Literal["Authorization", "X-Chroma-Token"]  # the two chromadb's TokenAuthClientProvider knows
DEFAULT_TENANT = "default_tenant"  # chromadb.config.DEFAULT_TENANT (a test keeps them equal)
DEFAULT_DATABASE = "default_database"  # chromadb.config.DEFAULT_DATABASE
_CHROMA_NAME = r"^[^/?#%\s]+$"  # it goes into a URL path as it is
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token (RFC 9110)
_TOKEN_CHARS = frozenset(string.ascii_letters + string.digits + string.punctuation)  # as chromadb's _check_token
EmbeddingProvider = Literal["local", "local-multilingual", "openai"]
LOCAL_MODEL = "all-MiniLM-L6-v2-int8"  # the bundled model: the local provider's only one
MULTILINGUAL_PROVIDER = "local-multilingual"  # the multilingual model in the process (an optional extra)
MULTILINGUAL_MODEL = "multilingual-e5-small-q4"  # that provider's only model
OPENAI_DEFAULT_MODEL = "text-embedding-3-small"  # embedding_model when the openai provider names none
OPENAI_HOST = "api.openai.com"  # the one host OPENAI_API_KEY is sent to (see embedding_api_key)
OPENAI_KEY_ENV = "OPENAI_API_KEY"
_URL = r"^https?://[^\s/?#]+(/[^\s?#]*)?$"
HTTP_DEFAULT_PORT = 8765  # chroma_mode=http without a port (managed mode takes a free one)
# claude-mem's own Chroma port (CLAUDE_MEM_CHROMA_PORT's default): the managed server's port while
# the upstream-readable store is on and chroma_port is unset, so claude-mem finds it unconfigured.
UPSTREAM_DEFAULT_PORT = 8000
UPSTREAM_COLLECTION = "cm__claude-mem"  # the one collection claude-mem 13.x writes and searches
_HOST = r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:[0-9]{1,5})?"
# A name (IPv6 in brackets) with an optional port; an origin is scheme://name[:port]. In the
# environment, comma-separated (NoDecode: not JSON).
HostList = Annotated[tuple[Annotated[str, StringConstraints(pattern=rf"^{_HOST}$")], ...], NoDecode]
OriginList = Annotated[tuple[Annotated[str, StringConstraints(pattern=rf"^https?://{_HOST}/?$")], ...], NoDecode]


def generation_number(base: str, name: str) -> int | None:
    """N when ``name`` is generation N (``<base>-g<N>``) of the collection ``base``, else None.
    ``chroma.collections`` names the generations; the settings check that the upstream
    store's collection is none of them."""
    prefix = base + "-g"
    rest = name[len(prefix):]
    return int(rest) if name.startswith(prefix) and rest.isdigit() else None


class Settings(BaseSettings):
    """Every knob of memsync: paths, Chroma connection, embedding, batch sizes, timeouts."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    db: Path = Field(
        default_factory=lambda: data_dir_choice().db,
        description="The agent's claude-mem SQLite database (read only); default: where claude-mem keeps it "
        "(CLAUDE_MEM_DATA_DIR in the environment, else in ~/.claude-mem/settings.json, else ~/.claude-mem).",
    )
    data_dir: Path = Field(Path("~/.memsync"), description="memsync's own directory: sync records, Chroma data, locks.")
    chroma_mode: ChromaMode = Field(
        "managed",
        description="managed: memsync runs `chroma run` for the data dir; http: an existing server; "
        "embedded: in-process store (single process only).",
    )
    chroma_host: str = Field("127.0.0.1", description="Chroma server host (http and managed modes).")
    chroma_port: int = Field(
        0, ge=0, le=65535, validate_default=True,
        description="Chroma server port. managed: 0 = a free port, taken when memsync starts the server and "
        "recorded in DATA_DIR/chroma-server.json (set one to pin it), or 8000 while upstream_store is on; "
        "http: the server's port, 0 = 8765.",
    )
    chroma_path: Path | None = Field(None, description="Chroma persistence directory; default DATA_DIR/chroma.")
    chroma_timeout_s: float = Field(30.0, gt=0, description="Timeout of every Chroma HTTP call, seconds.")
    chroma_start_timeout_s: float = Field(60.0, gt=0, description="How long to wait for a managed server to start.")
    chroma_ssl: bool = Field(False, description="http mode: talk to the server over HTTPS (TLS).")
    chroma_ca_file: Path | None = Field(
        None, description="http mode with chroma_ssl: the CA certificates (PEM) the server's certificate must chain "
        "to, e.g. a self-signed one; unset: the usual public CAs.",
    )
    chroma_api_key: SecretStr | None = Field(
        None, description="http mode: token for Chroma's token auth (or a proxy in front of the server), sent in "
        "chroma_auth_header. Printed as set/unset, never logged.",
    )
    chroma_auth_header: ChromaAuthHeader = Field(
        "Authorization", description="http mode: how chroma_api_key is sent, one of the two headers Chroma's token "
        "auth reads: `Authorization` (as `Bearer <token>`) or `X-Chroma-Token` (the token alone; Chroma Cloud).",
    )
    chroma_headers: dict[str, SecretStr] | None = Field(
        None, description="http mode: more headers sent with every request to Chroma (JSON object in the "
        "environment, a table in the file), e.g. a gateway's key; chroma_api_key wins over a header of the same "
        "name. Printed as set/unset, never logged.",
    )
    chroma_tenant: str = Field(
        DEFAULT_TENANT, min_length=1, max_length=256, pattern=_CHROMA_NAME,
        description="http mode: the Chroma tenant holding memsync's collections (it must exist).",
    )
    chroma_database: str = Field(
        DEFAULT_DATABASE, min_length=1, max_length=256, pattern=_CHROMA_NAME,
        description="http mode: the database of chroma_tenant holding memsync's collections (it must exist).",
    )
    chroma_log_level: Literal["error", "warn", "info", "debug"] = Field(
        "warn", description="Log level of the managed server (DATA_DIR/chroma-server.log); `info` logs every request.",
    )
    collection: str = Field(
        "memsync", min_length=3, max_length=60, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]$",
        description="Chroma collection name (a pointer to the active generation).",
    )
    upstream_store: bool = Field(
        False, description="Also keep a collection in claude-mem's own format (upstream_collection, texts "
        "included) that claude-mem's search reads when its CLAUDE_MEM_CHROMA_MODE=remote, _HOST and _PORT point "
        "at memsync's Chroma server. Needs chroma_mode managed (on chroma_port, 8000 when unset) or http.",
    )
    upstream_collection: str = Field(
        UPSTREAM_COLLECTION, min_length=3, max_length=60, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]$",
        description="The upstream-readable store's collection: claude-mem's name for it (cm__claude-mem).",
    )
    excluded_projects: str = Field(
        "", max_length=10_000,
        description="Projects neither synced nor searchable: comma-separated glob patterns (`*`, `**`, `?`), "
        "as claude-mem's CLAUDE_MEM_EXCLUDED_PROJECTS, which applies as well; matched against the project name.",
    )
    embedding_provider: EmbeddingProvider = Field(
        "local", description="Who turns texts into vectors: `local`, the bundled English model (offline); "
        f"`local-multilingual`, `{MULTILINGUAL_MODEL}` (offline, about 100 languages; needs "
        "`pip install 'memsync[multilingual]'`); `openai`, any OpenAI-compatible /v1/embeddings endpoint (OpenAI, "
        "Ollama, vLLM, LM Studio, llama.cpp's server). A change needs `memsync resync --rebuild`.",
    )
    embedding_model: str = Field(
        LOCAL_MODEL, min_length=1, max_length=200, validate_default=True,
        description=f"Embedding model. local: `{LOCAL_MODEL}` only (packaged ONNX); local-multilingual: "
        f"`{MULTILINGUAL_MODEL}` only; openai: the endpoint's model "
        f"name (default `{OPENAI_DEFAULT_MODEL}`). A change needs `memsync resync --rebuild`.",
    )
    embedding_base_url: str = Field(
        "https://api.openai.com/v1", pattern=_URL,
        description="openai provider: the endpoint's base URL, up to `/v1` (Ollama: `http://127.0.0.1:11434/v1`).",
    )
    embedding_dimension: int | None = Field(
        None, ge=1, le=65536, description="openai provider: the vectors' length; unset: learnt from the active "
        "collection generation or from one probe request. An answer of another length is an error.",
    )
    embedding_api_key: SecretStr | None = Field(
        None, validate_default=True,
        description=f"openai provider: key sent as `Authorization: Bearer`; unset: `{OPENAI_KEY_ENV}`, when the "
        f"base URL is {OPENAI_HOST}. Printed as set/unset, never logged.",
    )
    embedding_timeout_s: float = Field(
        30.0, gt=0, description="openai provider: timeout of one request, seconds (a search waits at most "
        "search_timeout_ms and does not retry).",
    )
    embedding_max_retries: int = Field(
        5, ge=0, le=20, description="openai provider: retries of a request answered 429 or 5xx, timed out or "
        "not connected, with exponential backoff and jitter (Retry-After honoured, up to backoff_cap_s).",
    )
    embedding_query_cache: int = Field(
        256, ge=0, le=100_000, description="Search, openai provider: query vectors kept per process (LRU), so a "
        "repeated query costs no request; 0 = none.",
    )
    embedding_batch_size: int = Field(
        32, ge=1, le=1024, description="Texts per model call (local) or per request (openai)."
    )
    embedding_max_tokens: int = Field(256, ge=16, le=512, description="Token limit per text (the model's own).")
    embedding_threads: int = Field(0, ge=0, le=64, description="The model's threads (onnxruntime intra-op; "
                                   "OpenMP for local-multilingual); 0 = one per core.")
    batch_size: int = Field(256, ge=1, le=5000, description="Documents per embed+upsert batch during sync.")
    read_batch_rows: int = Field(
        2000, ge=1, le=100_000,
        description="Source rows read per short read transaction (also the window sorted by length for embedding).",
    )
    sqlite_busy_timeout_ms: int = Field(5000, ge=0, description="SQLite busy timeout for every connection, ms.")
    claude_mem_timeout_s: float = Field(
        0.5, gt=0, description="status: how long to wait for claude-mem's worker to name its version (GET "
        "/api/health on loopback, asked only when no installed plugin names it), seconds.",
    )
    max_row_attempts: int = Field(3, ge=1, description="Tries of a failing row before it is left as failed.")
    poll_interval_s: float = Field(1.0, gt=0, description="Worker: how often it checks the database for new rows.")
    reconcile_interval_s: float = Field(
        600.0, gt=0, description="Worker: full hash comparison (edits, deletes) every this many seconds."
    )
    health_interval_s: float = Field(15.0, gt=0, description="Worker: how often it checks that Chroma answers.")
    store_audit_interval_s: float = Field(
        86400.0, gt=0, description="Worker: full check of Chroma's ids and hashes against the sync records every this "
        "many seconds (a count check runs at every reconcile and health check).",
    )
    backoff_cap_s: float = Field(60.0, gt=0, description="Worker: longest wait between retries while degraded.")
    low_space_mb: int = Field(
        64, ge=0, description="A failed write where less than this many MB are free is reported as a full disk "
        "(naming the directory), and a local Chroma store is not rebuilt while its disk is this low.",
    )
    window_days: int = Field(90, ge=0, description="Search recency window in days; 0 = all time.")
    candidates: int = Field(100, ge=1, le=5000, description="Semantic candidates fetched per search (top-N).")
    search_timeout_ms: int = Field(
        1500, ge=10, description="Search: deadline for the vector side of one query; past it, the lexical answer."
    )
    search_embedding_threads: int = Field(
        1, ge=0, le=64, description="Search: the model's threads to embed a query (1 leaves other cores to SQLite). "
        "The worker's injection search runs on the worker's own session, with embedding_threads.",
    )
    fts_timeout_ms: int = Field(2000, ge=10, description="Search: time limit of one SQLite/FTS5 statement, ms.")
    filter_ids_cap: int = Field(
        10000, ge=0, description="Search: a filter matching at most this many rows is searched exactly by id."
    )
    near_duplicate: float = Field(
        0.92, gt=0, le=1, description="similar(): cosine at or above which a row is a near-duplicate."
    )
    compact_churn_fraction: float = Field(
        0.5, ge=0, description="Worker: rebuild the collection from its live vectors (no re-embedding) when "
        "vectors updated or deleted since it was built reach this fraction of the live ones; 0 = never.")
    compact_min_churn: int = Field(1000, ge=0, description="Worker: ... and at least this many.")
    compact_idle_s: float = Field(120.0, ge=0, description="Worker: compact only after this long without new rows.")
    text_index: bool = Field(
        True, description="Worker: keep memsync's own BM25 index (tantivy) of the database in the data directory; "
        "searches use it for lexical ranking when it is there (FTS5 otherwise, and for rows it does not hold yet).")
    text_index_append_s: float = Field(
        30.0, ge=0, description="Worker: append new rows to the text index at most this often (each append is a "
        "commit and a segment to merge); searches take newer rows from FTS5 meanwhile.")
    vector_copy: bool = Field(
        True, description="Worker: keep a local int8 copy of the vectors it writes to Chroma, with their project, "
        "type and date, in the data directory; searches with a window or filter rank exactly from it.")
    vector_copy_check_s: float = Field(
        60.0, gt=0, description="Worker: how often it starts a check of the vector copy against its checksums "
        "(entries, then the vectors, 32 MB a step); a damaged copy is rebuilt from Chroma.")
    embedding_store: bool = Field(
        True, description="Sync: keep every vector it embeds in DATA_DIR/embeddings.db (float16, by model and "
        "text hash) and take it from there for any document with the same text and model (a rebuild, a "
        "re-derived document, repeated texts), so no text is embedded twice; false: every document is embedded.")
    lexical_feedback: bool = Field(
        True, description="Search: expand the query with the words its best text-index matches share "
        "(pseudo-relevance feedback, RM3-style); one more index query per kind.")
    serve_host: str = Field("127.0.0.1", description="memsync serve / mcp --http-port: address to listen on.")
    serve_port: int = Field(8787, ge=1, le=65535, description="memsync serve: HTTP port.")
    api_token: SecretStr | None = Field(
        None, description="Bearer token the HTTP servers require; mandatory when listening beyond loopback "
        "(empty or blank = unset).",
    )
    rerank_provider: Literal["none", "openai"] = Field(
        "none", description="Search: rerank the best fused candidates with a cross-encoder; `openai`: an "
        "OpenAI-style `/rerank` endpoint (vLLM, llama.cpp, Jina, Cohere-compatible servers).",
    )
    rerank_base_url: str | None = Field(
        None, pattern=_URL, description="Reranker endpoint base URL (`.../v1`); unset: embedding_base_url.",
    )
    rerank_model: str = Field("", max_length=200, description="Reranker model name (required with `openai`).")
    rerank_top_n: int = Field(30, ge=1, le=1000, description="Search: fused candidates the reranker reorders.")
    rerank_api_key: SecretStr | None = Field(
        None, description="Reranker key (`Authorization: Bearer`); unset: embedding_api_key. Never printed.",
    )
    min_confidence: float = Field(
        0.015, ge=0.0, le=1.0, description="Search lists: results whose confidence (the relevance model's "
        "calibrated chance that a result is relevant) is below this are not listed; each answer says how many "
        "were left out (`--all` / `all=true` lists them; 0 turns the cutoff off). 0.015 keeps 99 % of the evidence "
        "a first page holds on the dev set (chosen leave-one-conversation-out: docs/search.md). The injection "
        "decision has its own gate.")
    max_query_chars: int = Field(4000, ge=16, le=1_000_000,
                                 description="Longest query accepted (servers, `memsync search`, --batch lines).")
    mcp_structured: bool = Field(
        False, description="memsync mcp: tools also declare an output schema and return their answer as structured "
        "content beside the markdown. Off by default: Claude Code, opencode and Codex then show the model the "
        "structured JSON instead of the markdown, 2-2.5 times the tokens.")
    allowed_hosts: HostList = Field(
        (), description="HTTP servers: more Host names they answer (comma-separated; `name` any port, `name:port` "
        "that one) besides 127.0.0.1, localhost, [::1] and the listen address; any other Host gets 421.")
    allowed_origins: OriginList = Field(
        (), description="HTTP servers: more origins (`https://name[:port]`, comma-separated) whose pages may call "
        "them, with CORS headers for exactly these; a request from another Origin gets 403.")
    inject: bool = Field(
        True, description="Per-prompt memory for Claude Code (the hook `claude-code swap` installs): the worker "
        "answers it over DATA_DIR/inject.sock. Off: the worker does not listen and the hook exits at once with "
        "nothing (the hook itself stays installed).")
    inject_budget_tokens: int = Field(
        600, ge=1, le=1500, description="Per-prompt memory: the most tokens injected into one prompt (fewer, "
        "better memories are preferred over a full budget). The frame itself (its header saying how to read and "
        "open the memories) takes about 115 of them: under about 135, nothing fits.")
    inject_max_memories: int = Field(
        16, ge=1, le=16, description="Per-prompt memory: the most memories one prompt gets (16, the default, is the "
        "most the decision gives). Fewer memories are each shown at more length and more often the ones that "
        "answer, at the cost of how much of the answer gets in. Measured on the dev set (docs/benchmarks.md): at "
        "most 2, 0.30 of the injected memories are evidence and 0.43 of the evidence gets in; at most 16, 0.09 "
        "and 0.71. Whether a prompt gets any memory does not change.")
    inject_other_projects: bool = Field(
        False, description="Per-prompt memory: search every project's memory, not only the project of the "
        "prompt's folder (by claude-mem's project rule); each line names its project.")

    @field_validator("db", "data_dir", "chroma_path", "chroma_ca_file", mode="after")
    @classmethod
    def _expand(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None

    @model_validator(mode="before")
    @classmethod
    def _provider_default_model(cls, data: Any) -> Any:
        # The model's default depends on the provider: a remote provider without a model named gets
        # OPENAI_DEFAULT_MODEL, never the bundled model's name.
        if isinstance(data, dict) and not data.get("embedding_model"):
            default = {"openai": OPENAI_DEFAULT_MODEL, MULTILINGUAL_PROVIDER: MULTILINGUAL_MODEL}
            if (provider := data.get("embedding_provider")) in default:
                return {**data, "embedding_model": default[provider]}
        return data

    @model_validator(mode="after")
    def _upstream_store_reachable(self) -> Settings:
        if not self.upstream_store:
            return self
        if self.chroma_mode == "embedded":
            raise ValueError("upstream_store is read by claude-mem through a Chroma server: use chroma_mode=managed "
                             "(the default) or http, not embedded")
        own = self.collection
        name = self.upstream_collection
        if name == own or generation_number(own, name) is not None:
            raise ValueError(f"upstream_collection {name!r} is one of memsync's own collections ({own!r}); "
                             "name it differently")
        return self

    @property
    def server_port(self) -> int:
        """The managed server's fixed port: ``chroma_port``, else claude-mem's default while the
        upstream-readable store is on (so claude-mem finds it), else 0 (a free one)."""
        if self.chroma_port or not self.upstream_store:
            return self.chroma_port
        return UPSTREAM_DEFAULT_PORT

    @field_validator("embedding_model", mode="after")
    @classmethod
    def _model_of_provider(cls, value: str, info: ValidationInfo) -> str:
        provider = info.data.get("embedding_provider")
        if provider == "local" and value != LOCAL_MODEL:
            raise ValueError(f"the local provider has one model, {LOCAL_MODEL!r}; for {value!r} set "
                             "embedding_provider=openai and embedding_base_url to an endpoint that serves it")
        if provider == MULTILINGUAL_PROVIDER and value != MULTILINGUAL_MODEL:
            raise ValueError(f"the {MULTILINGUAL_PROVIDER} provider has one model, {MULTILINGUAL_MODEL!r}")
        if provider == "openai" and (value != value.strip() or not value.isprintable()):
            raise ValueError(f"{value!r} is not a model name")
        return value

    @field_validator("embedding_base_url", "rerank_base_url", mode="after")
    @classmethod
    def _no_trailing_slash(cls, value: str | None) -> str | None:
        return value.rstrip("/") if value else value

    @field_validator("embedding_api_key", mode="after")
    @classmethod
    def _openai_key(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        # OPENAI_API_KEY is meant for OpenAI: sent to api.openai.com only, never to another server
        # someone points embedding_base_url at (that one gets MEMSYNC_EMBEDDING_API_KEY).
        if value is None and os.environ.get(OPENAI_KEY_ENV) and openai_host(info.data.get("embedding_base_url")):
            return SecretStr(os.environ[OPENAI_KEY_ENV])
        return value

    @field_validator("rerank_model", mode="after")
    @classmethod
    def _rerank_model(cls, value: str, info: ValidationInfo) -> str:
        if info.data.get("rerank_provider") == "openai" and not value.strip():
            raise ValueError("rerank_provider=openai needs a model name (MEMSYNC_RERANK_MODEL)")
        return value

    @field_validator("api_token", mode="after")
    @classmethod
    def _blank_token_is_none(cls, value: SecretStr | None) -> SecretStr | None:
        # MEMSYNC_API_TOKEN="" used to count as "set" for the refusal to listen beyond
        # loopback and as "off" for the auth check, so the API served every interface unguarded.
        # A header value carries no surrounding whitespace, so the token is stripped too.
        token = value.get_secret_value().strip() if value is not None else ""
        return SecretStr(token) if token else None

    @property
    def bearer_token(self) -> str | None:
        """The token the HTTP servers require, or None when authentication is off: the one rule
        for every site that asks (settings display, the refusal to listen beyond loopback, the
        auth check). Checks again for blank: ``model_copy(update=...)`` skips the validator."""
        token = self.api_token.get_secret_value().strip() if self.api_token is not None else ""
        return token or None

    @field_validator("chroma_api_key", mode="after")
    @classmethod
    def _chroma_token(cls, value: SecretStr | None) -> SecretStr | None:
        # The message never repeats the value: it is a secret.
        if value is not None and not (value.get_secret_value() and set(value.get_secret_value()) <= _TOKEN_CHARS):
            raise ValueError("a Chroma token is ASCII letters, digits and punctuation, without spaces")
        return value

    @field_validator("chroma_headers", mode="after")
    @classmethod
    def _chroma_headers(cls, value: dict[str, SecretStr] | None) -> dict[str, SecretStr] | None:
        for name, secret in (value or {}).items():
            if not _HEADER_NAME.match(name):
                raise ValueError(f"{name!r} is not an HTTP header name")
            text = secret.get_secret_value()
            if not text.isprintable() or not text.isascii():  # no line breaks: no header injection
                raise ValueError(f"the value of header {name!r} must be printable ASCII on one line")
        return value or None

    @field_validator("chroma_port", mode="after")
    @classmethod
    def _http_port(cls, value: int, info: ValidationInfo) -> int:
        return HTTP_DEFAULT_PORT if value == 0 and info.data.get("chroma_mode") == "http" else value

    @field_validator("allowed_hosts", "allowed_origins", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        return tuple(x.strip() for x in value.split(",") if x.strip()) if isinstance(value, str) else value

    @property
    def chroma_dir(self) -> Path:
        """Where Chroma persists (embedded and managed modes)."""
        return self.chroma_path or self.data_dir / "chroma"

    @property
    def state_path(self) -> Path:
        """memsync's own sync-record database."""
        return self.data_dir / "state.db"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The TOML file is merged into init kwargs by load_settings at the lowest priority; env
        # then wins over it. No dotenv or secrets: one place to look.
        return (init_settings, env_settings)


def openai_env_key() -> str | None:
    """OPENAI_API_KEY from the environment (for api.openai.com only: see ``openai_host``)."""
    return os.environ.get(OPENAI_KEY_ENV) or None


def openai_host(url: str | None) -> bool:
    """Whether ``url`` is OpenAI's own API (the only place OPENAI_API_KEY may go)."""
    return bool(url) and urlsplit(str(url)).hostname == OPENAI_HOST


SECRET_KEYS = frozenset(n for n, f in Settings.model_fields.items() if "SecretStr" in str(f.annotation))


class SettingsError(ConfigError):
    """A setting has a bad value or the config file is unusable; the message names the key."""


@dataclass(frozen=True, slots=True)
class LoadedSettings:
    """Effective settings plus where each value came from (``default``, ``file:PATH``, ``env``, ``cli``)."""

    settings: Settings
    origins: dict[str, str]
    config_file: Path | None


def _config_file(explicit: Path | None, environ: dict[str, str]) -> tuple[Path | None, bool]:
    """The TOML file to read and whether its absence is an error (it is when named explicitly)."""
    if explicit is not None:
        return explicit.expanduser(), True
    if environ.get(ENV_PREFIX + "CONFIG"):
        return Path(environ[ENV_PREFIX + "CONFIG"]).expanduser(), True
    default = DEFAULT_CONFIG_FILE.expanduser()
    return (default, False) if default.exists() else (None, False)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise SettingsError(f"config file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"config file {path}: invalid TOML: {exc}") from exc
    # Accept both a flat file and one under a [memsync] table.
    table = data.get("memsync", data)
    if not isinstance(table, dict):
        raise SettingsError(f"config file {path}: [memsync] must be a table")
    return table


def load_settings(
    cli: dict[str, Any] | None = None,
    config_file: Path | None = None,
) -> LoadedSettings:
    """Build the effective settings from flags (``cli``; None values are ignored), env, file, defaults.

    Raises SettingsError with one line naming the offending key and its origin.
    """
    env = dict(os.environ)
    cli_values = {k: v for k, v in (cli or {}).items() if v is not None}
    path, required = _config_file(config_file, env)
    file_values: dict[str, Any] = {}
    if path is not None:
        if not path.exists():
            if required:
                raise SettingsError(f"config file {path}: does not exist")
        else:
            file_values = _read_toml(path)
    unknown = sorted(set(file_values) - set(Settings.model_fields))
    if unknown:
        raise SettingsError(f"config file {path}: unknown setting {unknown[0]!r}")

    origins: dict[str, str] = {}
    for name in Settings.model_fields:
        if name in cli_values:
            origins[name] = "cli"
        elif ENV_PREFIX + name.upper() in env:
            origins[name] = "env"
        elif name in file_values:
            origins[name] = f"file:{path}"
        elif name == "db" and (rule := data_dir_choice(env).rule) != DEFAULT_DIR_RULE:
            origins[name] = f"claude-mem: {rule}"  # found by claude-mem's own rule, not memsync's default
        elif name == "embedding_api_key" and env.get(OPENAI_KEY_ENV):
            origins[name] = f"env:{OPENAI_KEY_ENV}"  # taken only for api.openai.com (see the validator)
        else:
            origins[name] = "default"
    merged = {**file_values, **cli_values}
    # Env must beat the file but lose to flags: pass file values only where env does not set them.
    init = {k: v for k, v in merged.items() if origins[k] in ("cli",) or origins[k].startswith("file:")}
    try:
        settings = Settings(**init)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else "?"
        origin = origins.get(key, "?")
        where = f"{ENV_PREFIX}{key.upper()} from env" if origin == "env" else f"from {origin}"
        raise SettingsError(f"invalid setting {key} ({where}): {err['msg']}") from exc
    return LoadedSettings(settings=settings, origins=origins, config_file=path if file_values or required else None)


def describe(loaded: LoadedSettings) -> list[dict[str, Any]]:
    """Rows of (key, value, origin, env name, help) for ``memsync settings``; secrets (keys, tokens)
    show as ``set`` or ``unset``, never their value."""
    rows = []
    for name, field in Settings.model_fields.items():
        value = getattr(loaded.settings, name)
        if name == "api_token":
            value = "set" if loaded.settings.bearer_token else "unset"
        elif name in SECRET_KEYS:
            value = "set" if value is not None else "unset"
        rows.append(
            {
                "key": name,
                "value": str(value) if isinstance(value, Path) else value,
                "origin": loaded.origins[name],
                "env": ENV_PREFIX + name.upper(),
                "help": field.description or "",
            }
        )
    return rows
