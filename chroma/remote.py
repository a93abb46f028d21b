"""A Chroma server someone else runs: TLS, token auth, custom headers, tenant and database.

:class:`Endpoint` is everything needed to reach one server; :func:`endpoint` builds it from the
settings. Only ``http`` mode uses the remote settings: the managed server is memsync's own
``chroma run`` on loopback, plain HTTP, no auth, the default tenant and database.

Secrets (the token, header values) live in ``Endpoint.headers`` only, which has no ``repr``;
every message names the server's URL and the setting to fix, never a header's value.

A server that answers but refuses us is a :class:`StoreRefused` (fix the setup), not a
:class:`StoreUnavailable` (wait and retry): 401/403 on any request, 404 for the tenant or the
database, a certificate that does not verify. chromadb itself would say "Could not connect to
tenant X. Are you sure it exists?" for a refused token too (it turns every error of its tenant
check into that ValueError), so :func:`check_access` asks first, with plain httpx.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from ssl import SSLCertVerificationError, SSLContext, SSLError, create_default_context
from urllib.parse import quote

import httpx

from memsync.config.errors import StoreRefused, StoreUnavailable
from memsync.config.settings import DEFAULT_DATABASE, DEFAULT_TENANT, Settings

REFUSED_STATUSES = frozenset({401, 403})


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One Chroma server as a client reaches it. Hashable: the key of the per-process client cache."""

    host: str
    port: int
    ssl: bool = False
    ca_file: str | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # secrets: never printed
    tenant: str = DEFAULT_TENANT
    database: str = DEFAULT_DATABASE

    @property
    def url(self) -> str:
        """``http(s)://host:port``: how messages name the server."""
        return f"{'https' if self.ssl else 'http'}://{self.host}:{self.port}"

    @property
    def default_scope(self) -> bool:
        """Whether this is chromadb's default tenant and database."""
        return self.tenant == DEFAULT_TENANT and self.database == DEFAULT_DATABASE

    def describe(self) -> str:
        """The URL, plus the tenant and database when they are not the default ones."""
        return self.url if self.default_scope else f"{self.url} (tenant {self.tenant}, database {self.database})"

    def verify(self) -> SSLContext | bool:
        """What httpx verifies the server's certificate with: ``ca_file``'s CAs, else its defaults."""
        return _ca_context(self.ca_file) if self.ssl and self.ca_file else True

    def header_dict(self) -> dict[str, str]:
        """The headers every request carries (token included)."""
        return dict(self.headers)


@functools.cache
def _ca_context(ca_file: str) -> SSLContext:
    # One context per file and process: loading the CAs costs more than the heartbeat it serves.
    try:
        return create_default_context(cafile=ca_file)
    except (OSError, SSLError) as exc:
        raise StoreRefused(f"chroma_ca_file {ca_file}: cannot load CA certificates: {exc}") from exc


def auth_headers(settings: Settings) -> dict[str, str]:
    """The headers of http mode: ``chroma_headers``, then the token as Chroma's token auth reads it
    (``Authorization: Bearer <token>`` or ``X-Chroma-Token: <token>``, chromadb's
    TokenAuthClientProvider's two forms), which wins over a custom header of the same name."""
    headers = {name: value.get_secret_value() for name, value in (settings.chroma_headers or {}).items()}
    if settings.chroma_api_key is not None:
        token = settings.chroma_api_key.get_secret_value()
        headers = {k: v for k, v in headers.items() if k.lower() != settings.chroma_auth_header.lower()}
        headers[settings.chroma_auth_header] = f"Bearer {token}" if settings.chroma_auth_header == "Authorization" \
            else token
    return headers


def endpoint(settings: Settings, host: str, port: int) -> Endpoint:
    """The server at host:port as ``settings`` reach it: http mode with its TLS, headers, tenant
    and database; any other mode (the managed server) plainly."""
    if settings.chroma_mode != "http":
        return Endpoint(host, port)
    return Endpoint(host, port, ssl=settings.chroma_ssl,
                    ca_file=str(settings.chroma_ca_file) if settings.chroma_ca_file else None,
                    headers=tuple(sorted(auth_headers(settings).items())),
                    tenant=settings.chroma_tenant, database=settings.chroma_database)


def refused(ep: Endpoint, status: int, what: str = "the request") -> StoreRefused:
    """The error for a 401/403: the server refused the credentials memsync sent."""
    sent = "no token" if not ep.headers else "the configured token/headers"
    return StoreRefused(f"Chroma at {ep.url} refused {what} (HTTP {status}): it does not accept {sent}; "
                        "check chroma_api_key, chroma_auth_header and chroma_headers")


def tls_failure(ep: Endpoint, exc: Exception) -> StoreRefused | None:
    """A StoreRefused when ``exc`` is a certificate that did not verify (a wrong or missing
    chroma_ca_file: waiting will not fix it), else None."""
    text = str(exc)
    if isinstance(exc, SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in text:
        return StoreRefused(f"Chroma at {ep.url}: its TLS certificate did not verify ({text[:200]}); "
                            "set chroma_ca_file to the CA that signed it")
    return None


def check_access(ep: Endpoint, timeout_s: float) -> None:
    """Ask the server for the tenant and the database memsync will use, with its credentials:
    StoreRefused when it refuses them or has no such tenant or database, StoreUnavailable when it
    does not answer. Two small GETs; callers do it once per client (and the CLI before a search)."""
    base = f"{ep.url}/api/v2/tenants/{quote(ep.tenant, safe='')}"
    for what, url in (("tenant", base), ("database", f"{base}/databases/{quote(ep.database, safe='')}")):
        try:
            resp = httpx.get(url, headers=ep.header_dict(), verify=ep.verify(), timeout=timeout_s)
        except httpx.HTTPError as exc:
            raise tls_failure(ep, exc) or StoreUnavailable(f"Chroma at {ep.url}: {what} check failed: {exc}") from exc
        if resp.status_code in REFUSED_STATUSES:
            raise refused(ep, resp.status_code, f"the {what} check")
        if resp.status_code == 404:  # chroma 1.5.9: {"error": "NotFoundError", ...} for either
            name = ep.tenant if what == "tenant" else f"{ep.database} (tenant {ep.tenant})"
            setting = "chroma_tenant" if what == "tenant" else "chroma_database"
            raise StoreRefused(f"Chroma at {ep.url} has no {what} {name}; create it (chromadb AdminClient) "
                               f"or set {setting}")
        if resp.status_code != 200:
            raise StoreUnavailable(f"Chroma at {ep.url}: {what} check answered HTTP {resp.status_code}")

