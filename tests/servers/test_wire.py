"""servers.wire: requests uvicorn cannot parse, answered in the API's JSON shape, on a real uvicorn
server with each protocol (httptools', as `memsync serve` runs it, and the h11 fallback)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from memsync.servers.wire import H11_MAX_HEAD, MAX_QUERY_STRING, MAX_URL, JsonH11Protocol, protocol_class
from tests.conftest import free_port

pytestmark = pytest.mark.slow  # real uvicorn servers (in threads)


async def ok(scope: Scope, receive: Receive, send: Send) -> None:
    """An app that answers every request it is given 200 ``ok``."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture(params=["httptools", "h11"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[int, int]]:
    """(port, longest request head it parses) of a uvicorn server on 127.0.0.1 with one of the two
    protocols, stopped at the end."""
    chosen: type[asyncio.Protocol] = protocol_class() if request.param == "httptools" else JsonH11Protocol
    assert (chosen is JsonH11Protocol) == (request.param == "h11")  # httptools is installed here
    port = free_port()
    uv = uvicorn.Server(uvicorn.Config(ok, host="127.0.0.1", port=port, http=chosen, log_level="critical",
                                       h11_max_incomplete_event_size=H11_MAX_HEAD, lifespan="off"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started:  # uvicorn has no event to wait on: polled with a deadline
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        # httptools refuses a URL past MAX_URL as it arrives; h11 a head past H11_MAX_HEAD.
        yield port, (len(b"GET ") + MAX_URL if request.param == "httptools" else H11_MAX_HEAD)
    finally:
        uv.should_exit = True
        thread.join(30)


def exchange(port: int, request: bytes, whole: bool = True) -> tuple[bytes, bytes]:
    """Send ``request`` raw and read the whole answer (the server closes after it): (head, body).
    ``whole=False``: the request is the start of one that the server must refuse before it ends
    (nothing follows it, so the server has read it all when it closes: no reset)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        if whole:
            sock.shutdown(socket.SHUT_WR)
        answer = b"".join(iter(lambda: sock.recv(65536), b""))
    head, _, body = answer.partition(b"\r\n\r\n")
    return head, body


def get(port: int, target: bytes) -> tuple[bytes, bytes]:
    return exchange(port, b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")


def test_a_long_query_string_within_the_limit_reaches_the_app(server: tuple[int, int]) -> None:
    head, body = get(server[0], b"/api/search?q=" + b"x" * MAX_QUERY_STRING)
    assert head.startswith(b"HTTP/1.1 200") and body == b"ok"


def test_a_url_too_long_to_parse_gets_a_json_414(server: tuple[int, int]) -> None:
    """A query string over 64 KB used to get uvicorn's plain-text 400."""
    port, limit = server
    start = b"GET /api/search?q="
    head, body = exchange(port, start + b"x" * (limit - len(start) + 1), whole=False)
    assert head.startswith(b"HTTP/1.1 414") and b"content-type: application/json" in head, head
    assert body == b'{"detail": "URL longer than 65535 bytes; a query string may have at most 57344"}'


def test_a_malformed_request_gets_a_json_400(server: tuple[int, int]) -> None:
    head, body = exchange(server[0], b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nno colon here\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and body == b'{"detail": "malformed HTTP request"}'
