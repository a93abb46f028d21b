"""DNS rebinding and body limits: the Host/Origin rule (``servers.hosts``) as a unit, the same lists
in the MCP SDK's own checker, the ASGI middlewares on a tiny app, and `memsync serve` as a real
process refusing a foreign Host or Origin and an oversized chunked body."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import httpx
import pytest
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from memsync.config.settings import Settings, SettingsError, load_settings
from memsync.servers.hosts import HostGuard, HostRule, bearer_ok, host_name, split_host
from memsync.servers.http_api import MAX_BODY, BodyLimit
from tests.servers.conftest import HttpServer, corpus


def rule(listen: str = "127.0.0.1", port: int = 8787, **settings: object) -> HostRule:
    return HostRule.of(Settings(**settings), listen, port)  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "expected"), [
    ("localhost", ("localhost", None)), ("LocalHost:8787", ("localhost", 8787)), ("[::1]:80", ("[::1]", 80)),
    ("[::1]", ("[::1]", None)), ("127.0.0.1:1", ("127.0.0.1", 1)),
])
def test_split_host(value: str, expected: tuple[str, int | None]) -> None:
    assert split_host(value) == expected


@pytest.mark.parametrize("value", ["", "a:b:c", "localhost:", "localhost:x", "localhost:70000", "[::1", "[::1]x",
                                   "a/b", "user@host", "::1"])
def test_split_host_refuses_what_is_not_a_host(value: str) -> None:
    with pytest.raises(ValueError):
        split_host(value)


def test_listen_address_names() -> None:
    assert host_name("10.0.0.5") == "10.0.0.5" and host_name("::1") == "[::1]" and host_name("Box.LAN") == "box.lan"
    assert host_name("0.0.0.0") is None and host_name("::") is None


@pytest.mark.parametrize(("host", "allowed"), [
    ("127.0.0.1:8787", True), ("127.0.0.1", True), ("localhost:8787", True), ("LOCALHOST:9000", True),
    ("[::1]:8787", True), ("[::1]", True),
    ("attacker.example", False), ("attacker.example:8787", False), ("127.0.0.1.attacker.example:8787", False),
    ("localhost.attacker.example", False), ("10.0.0.5:8787", False), ("0.0.0.0:8787", False), ("", False),
    (None, False), ("localhost:8787@attacker", False),
])
def test_default_hosts_are_the_loopback_names(host: str | None, allowed: bool) -> None:
    assert rule().host_allowed(host) is allowed
    status = rule().refusal(host, None)
    assert (status is None) is allowed
    if status:
        assert status[0] == 421 and "allowed_hosts" in status[1] and "MEMSYNC_ALLOWED_HOSTS" in status[1]


def test_listen_address_and_configured_names_are_allowed() -> None:
    assert rule("10.0.0.5").host_allowed("10.0.0.5:8787") and not rule().host_allowed("10.0.0.5:8787")
    assert rule("0.0.0.0").names == {"127.0.0.1", "localhost", "[::1]"}
    assert rule("fe80::1").host_allowed("[fe80::1]:8787")
    configured = rule(allowed_hosts=("memsync.lan", "Box:8080"))
    assert configured.host_allowed("memsync.lan") and configured.host_allowed("memsync.lan:1234")
    assert configured.host_allowed("box:8080") and not configured.host_allowed("box:8081")
    assert not configured.host_allowed("box") and not configured.host_allowed("attacker.example")


@pytest.mark.parametrize(("origin", "allowed"), [
    (None, True), ("", True), ("http://127.0.0.1:8787", True), ("http://localhost:8787", True),
    ("http://[::1]:8787", True), ("HTTP://LOCALHOST:8787", True),
    ("http://localhost:3000", False), ("https://127.0.0.1:8787", False), ("http://attacker.example", False),
    ("http://attacker.example:8787", False), ("null", False), ("http://127.0.0.1", False),
])
def test_origins_are_the_servers_own_by_default(origin: str | None, allowed: bool) -> None:
    r = rule()
    assert r.origin_allowed(origin) is allowed and r.cors == ()
    refused = r.refusal("127.0.0.1:8787", origin)
    assert refused is None if allowed else refused is not None and refused[0] == 403


def test_configured_origins_are_allowed_and_get_cors() -> None:
    r = rule(port=80, allowed_hosts=("box:8080",), allowed_origins=("https://memsync.example/",))
    assert r.cors == ("https://memsync.example",)
    for origin in ("https://memsync.example", "http://localhost", "http://localhost:80", "http://box:8080"):
        assert r.origin_allowed(origin), origin
    assert not r.origin_allowed("http://memsync.example") and not r.origin_allowed("https://box:8080")


@pytest.mark.parametrize(("listen", "hosts"), [("127.0.0.1", ()), ("10.0.0.5", ("memsync.lan", "box:8080"))])
def test_the_mcp_sdk_checks_the_same_lists(listen: str, hosts: tuple[str, ...]) -> None:
    """What HostRule allows, the SDK's TransportSecurityMiddleware allows with sdk_hosts/sdk_origins."""
    r = rule(listen, 8788, allowed_hosts=hosts, allowed_origins=("https://memsync.example",))
    sdk = TransportSecurityMiddleware(TransportSecuritySettings(allowed_hosts=r.sdk_hosts(),
                                                                allowed_origins=r.sdk_origins()))
    for host in ("127.0.0.1:8788", "127.0.0.1", "localhost:1", "[::1]:8788", "10.0.0.5:8788", "memsync.lan",
                 "memsync.lan:9", "box:8080", "box:8081", "attacker.example", "attacker.example:8788",
                 "127.0.0.1.attacker.example:8788", ""):
        assert sdk._validate_host(host) is r.host_allowed(host), host
    for origin in ("http://127.0.0.1:8788", "http://localhost:8788", "http://localhost:3000", "http://box:8080",
                   "https://memsync.example", "http://attacker.example", "null"):
        assert sdk._validate_origin(origin) is r.origin_allowed(origin), origin


def test_lists_come_from_the_environment_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSYNC_ALLOWED_HOSTS", "memsync.lan, box:8080,,[fe80::1]")
    monkeypatch.setenv("MEMSYNC_ALLOWED_ORIGINS", "https://memsync.example")
    s = load_settings().settings
    assert s.allowed_hosts == ("memsync.lan", "box:8080", "[fe80::1]")
    assert s.allowed_origins == ("https://memsync.example",)
    assert Settings.model_fields["allowed_hosts"].default == Settings.model_fields["allowed_origins"].default == ()
    monkeypatch.setenv("MEMSYNC_ALLOWED_HOSTS", "http://memsync.lan/")
    with pytest.raises(SettingsError, match="allowed_hosts"):
        load_settings()
    monkeypatch.setenv("MEMSYNC_ALLOWED_HOSTS", "")
    monkeypatch.setenv("MEMSYNC_ALLOWED_ORIGINS", "memsync.example")
    with pytest.raises(SettingsError, match="allowed_origins"):
        load_settings()


@pytest.mark.parametrize(("authorization", "allowed"), [
    ("Bearer s3cret", True), ("bearer s3cret", True), ("BEARER s3cret", True), ("bEaReR s3cret", True),
    ("Bearer  s3cret", True),  # RFC 6750: one or more spaces after the scheme
    ("Bearer S3CRET", False), ("bearer s3cret ", False), ("Bearer s3cre", False), ("Bearer", False),
    ("Bearers3cret", False), ("Basic s3cret", False), ("s3cret", False), ("Bearer\ts3cret", False), ("", False),
    (None, False),
])
def test_bearer_scheme_is_any_case_and_the_token_exact(authorization: str | None, allowed: bool) -> None:
    """`bearer <token>` was refused: HTTP's auth schemes are case-insensitive (RFC 9110 §11.1)."""
    assert bearer_ok(authorization, "s3cret") is allowed
    assert bearer_ok(authorization, None)  # no token set: every request


# The middlewares on a tiny app (no search behind them).

async def echo(request: Request) -> PlainTextResponse:
    body = await request.body()
    return PlainTextResponse(f"secret memory; body {len(body)} bytes")


def tiny(r: HostRule) -> HostGuard:
    return HostGuard(BodyLimit(Starlette(routes=[Route("/", echo, methods=["GET", "POST"])]), MAX_BODY), r)


def ask(app: HostGuard, method: str = "GET", host: str = "127.0.0.1:8787", **kwargs: object) -> httpx.Response:
    async def run() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"http://{host}") as client:
            return await client.request(method, "/", **kwargs)  # type: ignore[arg-type]

    return asyncio.run(run())


def test_guard_answers_allowed_hosts_and_refuses_others() -> None:
    app = tiny(rule())
    assert ask(app).text == "secret memory; body 0 bytes"
    assert ask(app, host="localhost:8787", headers={"Origin": "http://localhost:8787"}).status_code == 200
    refused = ask(app, host="attacker.example:8787")
    assert refused.status_code == 421 and "secret" not in refused.text
    assert refused.headers["content-type"] == "application/json" and "'attacker.example:8787'" in refused.json()[
        "detail"]
    foreign = ask(app, headers={"Origin": "http://attacker.example"})
    assert foreign.status_code == 403 and "secret" not in foreign.text and "allowed_origins" in foreign.json()["detail"]


def chunks(total: int, size: int = 4096) -> Iterator[bytes]:
    sent = 0
    while sent < total:
        yield b"x" * min(size, total - sent)
        sent += size


async def achunks(total: int) -> object:
    for chunk in chunks(total):
        yield chunk


def test_body_limit_counts_chunked_bodies() -> None:
    app = tiny(rule())
    ok = ask(app, "POST", content=achunks(MAX_BODY))
    assert ok.status_code == 200 and ok.text.endswith(f"body {MAX_BODY} bytes")
    over = ask(app, "POST", content=achunks(MAX_BODY + 1))
    assert over.status_code == 413 and "secret" not in over.text and str(MAX_BODY) in over.json()["detail"]
    declared = ask(app, "POST", content=b"x" * (MAX_BODY + 1))
    assert declared.status_code == 413


# `memsync serve` as a real process.

MEMORY = [r[k] for r in corpus() for k in ("narrative", "prompt_text", "request") if r.get(k)] + ["retry budget"]


def no_memory(text: str) -> bool:
    return not any(m.lower() in text.lower() for m in MEMORY)


@pytest.mark.slow
def test_serve_refuses_a_foreign_host(http_server: HttpServer) -> None:
    good = httpx.get(http_server.url + "/api/search", params={"q": "upload retries", "window_days": 0}, timeout=60)
    assert good.status_code == 200 and good.json()["results"] and not no_memory(good.text)
    page = httpx.get(http_server.url + "/", headers={"Host": f"localhost:{http_server.port}"}, timeout=60)
    assert page.status_code == 200 and 'id="search-form"' in page.text
    for path in ("/api/search?q=upload+retries&window_days=0", "/", "/api/records/observation/1", "/api/status",
                 "/openapi.json", "/healthz"):
        for host in ("attacker.example", f"attacker.example:{http_server.port}", "127.0.0.1.nip.io"):
            r = httpx.get(http_server.url + path, headers={"Host": host}, timeout=60)
            assert r.status_code == 421, (path, host, r.status_code)
            assert no_memory(r.text) and 'id="search-form"' not in r.text and "not a name" in r.json()["detail"]


@pytest.mark.slow
def test_serve_refuses_a_foreign_origin_and_sends_no_cors(http_server: HttpServer) -> None:
    url = http_server.url + "/api/search?q=upload+retries&window_days=0"
    r = httpx.get(url, headers={"Origin": "http://attacker.example"}, timeout=60)
    assert r.status_code == 403 and no_memory(r.text) and "access-control-allow-origin" not in r.headers
    own = httpx.get(url, headers={"Origin": http_server.url}, timeout=60)
    assert own.status_code == 200 and own.json()["results"] and "access-control-allow-origin" not in own.headers
    preflight = httpx.options(url, headers={"Origin": "http://attacker.example",
                                            "Access-Control-Request-Method": "GET"}, timeout=60)
    assert preflight.status_code == 403 and "access-control-allow-origin" not in preflight.headers


@pytest.mark.slow
def test_serve_refuses_an_oversized_chunked_body(http_server: HttpServer) -> None:
    url = http_server.url + "/api/search"
    over = httpx.post(url, content=chunks(MAX_BODY + 4096), timeout=60)
    assert over.status_code == 413 and "request body larger than" in over.json()["detail"]
    under = httpx.post(url, content=chunks(1000), timeout=60)
    assert under.status_code == 405  # read, then the route refuses the method
    declared = httpx.post(url, content=b"x" * (MAX_BODY + 1), timeout=60)
    assert declared.status_code == 413
    # A raw chunked request that keeps sending: answered 413 once past the limit, not read to its end.
    with socket.create_connection(("127.0.0.1", http_server.port), timeout=30) as sock:
        sock.sendall(f"POST /api/search HTTP/1.1\r\nHost: 127.0.0.1:{http_server.port}\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n".encode())
        chunk = b"%x\r\n%s\r\n" % (8192, b"y" * 8192)
        for _ in range(MAX_BODY // 8192 + 1):
            sock.sendall(chunk)
        head = sock.recv(4096).decode("latin-1")
        assert head.startswith("HTTP/1.1 413"), head


@pytest.mark.slow
def test_serve_allows_configured_hosts_and_origins(served: Settings) -> None:
    with HttpServer(served, MEMSYNC_ALLOWED_HOSTS="memsync.test",
                    MEMSYNC_ALLOWED_ORIGINS="https://memsync.example") as server:
        url = server.url + "/api/search?q=upload+retries&window_days=0"
        named = httpx.get(url, headers={"Host": "memsync.test"}, timeout=60)
        assert named.status_code == 200 and named.json()["results"]
        assert httpx.get(url, headers={"Host": "attacker.example"}, timeout=60).status_code == 421
        cors = httpx.get(url, headers={"Origin": "https://memsync.example"}, timeout=60)
        assert cors.status_code == 200 and cors.headers["access-control-allow-origin"] == "https://memsync.example"
        preflight = httpx.options(url, headers={"Origin": "https://memsync.example",
                                                "Access-Control-Request-Method": "GET",
                                                "Access-Control-Request-Headers": "authorization"}, timeout=60)
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://memsync.example"
        other = httpx.get(url, headers={"Origin": "https://other.example"}, timeout=60)
        assert other.status_code == 403 and "access-control-allow-origin" not in other.headers
