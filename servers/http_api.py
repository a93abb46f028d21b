"""The HTTP API and the search page (FastAPI on uvicorn).

FastAPI because it validates typed query parameters (a 422 naming the parameter) and serves the
OpenAPI document that tools and the API fuzz read, with no hand-written schema; uvicorn is
already what the MCP SDK runs on. Endpoints (``servers.endpoints``, one module per family) call
``servers.params`` and return the search library's JSON contract; the page at ``/`` is one
static HTML file with a little JavaScript.

Errors (``HTTP_ERRORS``, one table over the error tree): a refused value is 400
``{"detail": message}``; the database or store being unavailable is 503 with the reason; anything
unexpected is a 500 with a fixed message (the details go to the log, never to the client).
Listening beyond loopback needs ``api_token``; when a token is set
(``Settings.bearer_token``: an empty or blank one is none),
every endpoint but ``/``, ``/healthz`` and the OpenAPI document needs ``Authorization: Bearer``.
A request for a foreign ``Host`` (421) or from a foreign ``Origin`` (403) is refused before any
of this (``servers.hosts``: DNS rebinding); CORS headers only for the configured origins.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import version

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memsync.config.errors import BadData, InvalidRequest, MemsyncError, closest
from memsync.config.settings import Settings
from memsync.search import QueryTimeout, Searcher
from memsync.servers.endpoints import FAMILIES, ApiKit, Metrics, token_required
from memsync.servers.hosts import HostGuard, HostRule, check_binding
from memsync.servers.params import Requests
from memsync.servers.redact import public
from memsync.servers.wire import H11_MAX_HEAD, MAX_QUERY_STRING, QUERY_TOO_LONG, protocol_class

log = logging.getLogger("memsync.http")

MAX_BODY = 64 * 1024  # bytes; no endpoint takes a body

# How the HTTP API translates the error tree (config.errors): the status and the body's detail
# ({} is the error's message, file paths left out) of each branch it treats apart, the nearest one
# for every error. Anything outside the tree is a 500 with a fixed message.
HTTP_ERRORS: dict[type[MemsyncError], tuple[int, str]] = {
    InvalidRequest: (400, "{}"),
    BadData: (500, "{}"),  # handled where met; one that got here is a defect, not a moment's outage
    QueryTimeout: (503, "the database did not answer in time ({})"),
    MemsyncError: (503, "{}"),
}


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes gets 413, declared (``Content-Length``)
    or not (chunked: counted as it arrives, never read past the limit). The body, at most
    ``limit`` bytes, is read before the app runs and handed to it as one message."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def refuse(self, send: Send, status: int, detail: str) -> None:
        body = JSONResponse({"detail": detail}).body
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_big = f"request body larger than {self.limit} bytes"
        declared = [v for k, v in scope.get("headers") or [] if k == b"content-length"]
        if declared and (not declared[0].isdigit() or int(declared[0]) > self.limit):
            await self.refuse(send, 413 if declared[0].isdigit() else 400,
                              too_big if declared[0].isdigit() else "bad Content-Length")
            return
        chunks: list[bytes] = []
        size = 0
        pending: list[Message] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                pending.append(message)  # the client went away: the app sees it after the body
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self.refuse(send, 413, too_big)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        pending.insert(0, {"type": "http.request", "body": b"".join(chunks), "more_body": False})

        async def replay() -> Message:
            return pending.pop(0) if pending else await receive()

        await self.app(scope, replay, send)


class HeadAsGet:
    """ASGI middleware: HEAD answered as the GET of the same URL, without its body. RFC 9110 asks
    HEAD wherever GET works, and FastAPI's routes take only the methods they name (so
    ``HEAD /`` was 405). The GET's headers stay, Content-Length included, as HEAD wants."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headless(message: Message) -> None:
            await send({**message, "body": b""} if message["type"] == "http.response.body" else message)

        await self.app({**scope, "method": "GET"}, receive, headless)


def create_app(settings: Settings, searcher: Searcher | None = None, host: str | None = None,
               port: int | None = None) -> FastAPI:
    """The FastAPI application on one shared Searcher (closed when the app shuts down), answering
    the names of a server on ``host:port`` (default ``serve_host:serve_port``); its endpoints are
    those of ``servers.endpoints.FAMILIES``."""
    searcher = searcher or Searcher(settings)
    app = FastAPI(title="memsync", version=version("memsync"), docs_url=None, redoc_url=None,
                  description="Search an AI coding agent's memory (claude-mem): hybrid semantic + full-text "
                              "search, timelines, records and status. JSON in the `memsync search --json` contract.")
    app.router.on_shutdown.append(searcher.close)
    api = ApiKit(app, settings, searcher, Requests(searcher, settings.max_query_chars), Metrics(),
                 token_required(settings.bearer_token))
    add_middleware(app, HostRule.of(settings, host or settings.serve_host, port or settings.serve_port), api.metrics)
    add_error_handlers(app, settings)
    for register in FAMILIES:
        register(api)
    return app


def add_middleware(app: FastAPI, rule: HostRule, metrics: Metrics) -> None:
    """Outermost last: measure → HEAD as GET → HostGuard → CORS (configured origins only) → BodyLimit → routes."""
    app.add_middleware(BodyLimit, limit=MAX_BODY)
    if rule.cors:
        app.add_middleware(CORSMiddleware, allow_origins=list(rule.cors), allow_methods=["GET"],
                           allow_headers=["Authorization"], allow_credentials=False)
    app.add_middleware(HostGuard, rule=rule)
    app.add_middleware(HeadAsGet)

    @app.middleware("http")
    async def measure(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        t = time.perf_counter()
        # Every endpoint is a GET with a short query string: refuse anything bigger before it is read
        # (bodies: BodyLimit).
        if len(request.scope.get("query_string", b"")) > MAX_QUERY_STRING:
            response: Response = JSONResponse({"detail": QUERY_TOO_LONG}, status_code=414)
        else:
            response = await call_next(request)
        route = request.scope.get("route")
        name = getattr(route, "path", "unmatched")
        metrics.requests.labels(name, str(response.status_code)).inc()
        metrics.seconds.labels(name).observe(time.perf_counter() - t)
        return response


def add_error_handlers(app: FastAPI, settings: Settings) -> None:
    """The error tree as statuses (``HTTP_ERRORS``); anything else a 500 whose details stay in the log."""

    @app.exception_handler(MemsyncError)
    async def translated(request: Request, exc: MemsyncError) -> JSONResponse:
        status, detail = closest(exc, HTTP_ERRORS)
        if status >= 500:  # ours to look into; a refused request is the client's
            log.warning("%s: %s", request.url.path, exc)
        return JSONResponse({"detail": detail.format(public(str(exc), settings))}, status_code=status)

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", request.url.path)
        return JSONResponse({"detail": "internal error (details are in the server's log)"}, status_code=500)


def serve(settings: Settings, host: str | None = None, port: int | None = None) -> None:
    """Run the API with uvicorn until interrupted."""
    import uvicorn

    host = host or settings.serve_host
    port = port or settings.serve_port
    check_binding(host, settings)
    # servers.wire: a URL too long to parse, or a malformed request, answered in JSON too.
    uvicorn.run(create_app(settings, host=host, port=port), host=host, port=port, log_level="warning",
                limit_concurrency=64, timeout_graceful_shutdown=5, http=protocol_class(),
                h11_max_incomplete_event_size=H11_MAX_HEAD)
