"""The HTTP/1.1 protocol under the HTTP API: uvicorn's own, with its answer to a request it cannot
parse given in the API's JSON shape (``{"detail": message}``) instead of plain text.

uvicorn answers such a request itself, before the app runs, with ``400 Invalid HTTP request
received.`` as text. A URL over 64 KB is one: httptools' URL parser refuses any longer
than 65,535 bytes, so the app's own 414 for a query string over ``MAX_QUERY_STRING`` never ran.
Here a URL is counted as it arrives and one over :data:`MAX_URL` gets that 414 at once, never
buffered further; any other malformed request gets a JSON 400. httptools when installed (it comes
with chromadb's ``uvicorn[standard]``), else h11 with room for the longest URL allowed.

Also here: JSON text from MCP clients with an unpaired UTF-16 surrogate escaped in a string
(``"\\ud800"``) is repaired before the MCP SDK reads it (:func:`lone_surrogates_replaced`, on each
stdio line and on each streamable-HTTP body). The SDK parses with pydantic-core, which refuses
such a string as invalid JSON: over stdio the request then got no answer at all, over HTTP a parse
error, and the search never ran (docs/servers.md, "Text that is not valid Unicode"). Bytes that are
not UTF-8 become U+FFFD on both transports as well: the stdio lines are decoded that way, and an
HTTP body is repaired the same way (:func:`valid_utf8`), where pydantic-core refused it as a parse
error with no id, the request lost.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterable, AsyncIterator

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_QUERY_STRING = 56 * 1024  # bytes; 4,000 emoji percent-encoded (48 KB) plus the other parameters fit
MAX_URL = (1 << 16) - 1  # httptools' own ceiling (MAX_URL_LENGTH): anything longer it cannot parse
H11_MAX_HEAD = MAX_URL + 16 * 1024  # h11: the request line (up to MAX_URL) and the headers
MALFORMED = "malformed HTTP request"
QUERY_TOO_LONG = f"query string longer than {MAX_QUERY_STRING} bytes"  # the app's 414 (servers.http_api)
URL_TOO_LONG = f"URL longer than {MAX_URL} bytes; a query string may have at most {MAX_QUERY_STRING}"


def error_response(status: int, detail: str, headers: list[tuple[bytes, bytes]]) -> bytes:
    """A whole HTTP/1.1 response: ``{"detail": detail}`` as JSON, the connection closed after it."""
    body = json.dumps({"detail": detail}).encode()
    reason = {400: b"Bad Request", 414: b"URI Too Long"}[status]
    lines = [b"HTTP/1.1 %d %s\r\n" % (status, reason)]
    lines += [name + b": " + value + b"\r\n" for name, value in headers]
    lines += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body),
              b"connection: close\r\n", b"\r\n", body]
    return b"".join(lines)


class JsonH11Protocol(H11Protocol):
    """h11's protocol: a request line over MAX_URL gets a JSON 414, a malformed request a JSON 400.
    Run it with ``h11_max_incomplete_event_size=H11_MAX_HEAD`` (h11's default, 16 KB, is shorter
    than the query strings the API takes)."""

    def send_400_response(self, msg: str) -> None:
        # h11 keeps what it could not parse: a first line still longer than MAX_URL is the URL.
        request_line = bytes(self.conn.trailing_data[0]).split(b"\r\n", 1)[0]
        status, detail = (414, URL_TOO_LONG) if len(request_line) > MAX_URL else (400, MALFORMED)
        self.transport.write(error_response(status, detail, self.server_state.default_headers))
        self.transport.close()


def protocol_class() -> type[asyncio.Protocol]:
    """The protocol for uvicorn's ``http=``: httptools' when it is installed, else h11's."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return JsonH11Protocol

    class JsonHttpToolsProtocol(HttpToolsProtocol):
        """httptools' protocol: a URL over MAX_URL gets a JSON 414, a malformed request a JSON 400."""

        url_over_limit = False

        def on_url(self, url: bytes) -> None:
            super().on_url(url)
            if len(self.url) > MAX_URL:
                self.url_over_limit = True
                # Stops the parser: uvicorn answers through send_400_response, reading no more.
                raise ValueError("URL too long")

        def send_400_response(self, msg: str) -> None:
            status, detail = (414, URL_TOO_LONG) if self.url_over_limit else (400, MALFORMED)
            self.transport.write(error_response(status, detail, self.server_state.default_headers))
            self.transport.close()

    return JsonHttpToolsProtocol


# In JSON text, left to right: an escaped backslash (so that "\\ud800" is not read as an escape),
# a surrogate pair's two escapes (kept), or one surrogate's escape on its own (replaced).
_SURROGATE_ESCAPES = re.compile(rb"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
                                rb"|\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_ANY_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_REPLACEMENT_ESCAPE = rb"\ufffd"


def _repaired(match: re.Match[bytes]) -> bytes:
    return _REPLACEMENT_ESCAPE if len(match.group()) == 6 else match.group()


def lone_surrogates_replaced(json_text: bytes) -> bytes:
    """JSON text with every escape of an unpaired UTF-16 surrogate (``\\ud800``, ``\\udc00``)
    replaced by ``\\ufffd`` (U+FFFD, the replacement character); pairs and everything else as given."""
    if not _ANY_SURROGATE_ESCAPE.search(json_text):
        return json_text
    return _SURROGATE_ESCAPES.sub(_repaired, json_text)


def valid_utf8(json_text: bytes) -> bytes:
    """JSON text with each byte sequence that is not UTF-8 replaced by U+FFFD (as the stdio
    transport decodes its lines, ``errors="replace"``); valid UTF-8 is returned as it is."""
    try:
        json_text.decode("utf-8")
    except UnicodeDecodeError:
        return json_text.decode("utf-8", "replace").encode("utf-8")
    return json_text


async def repaired_lines(lines: AsyncIterable[str]) -> AsyncIterator[str]:
    """Lines of JSON text (MCP over stdio), each with its unpaired surrogate escapes replaced."""
    async for line in lines:
        # The escapes are ASCII: this round trip changes nothing else (surrogateescape keeps any
        # code point a byte could not encode, though a line decoded as UTF-8 has none).
        yield lone_surrogates_replaced(line.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")


class RepairedJsonBody:
    """ASGI middleware: a request body of at most ``limit`` bytes is read whole and handed on with
    bytes that are not UTF-8 and unpaired surrogate escapes replaced (:func:`valid_utf8`,
    :func:`lone_surrogates_replaced`); a longer one is handed on as it arrives (the app refuses
    its size)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        pending: list[Message] = []
        size = 0
        while True:
            message = await receive()
            pending.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.limit or not message.get("more_body", False):
                break
        bodies = [m for m in pending if m["type"] == "http.request"]
        if size <= self.limit and bodies and not bodies[-1].get("more_body", False):
            whole = lone_surrogates_replaced(valid_utf8(b"".join(m.get("body", b"") for m in bodies)))
            pending = [{"type": "http.request", "body": whole, "more_body": False},
                       *(m for m in pending if m["type"] != "http.request")]

        async def replay() -> Message:
            return pending.pop(0) if pending else await receive()

        await self.app(scope, replay, send)
