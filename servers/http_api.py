"""The HTTP API and the search page (FastAPI on uvicorn).

FastAPI because it validates typed query parameters (a 422 naming the parameter) and serves the
OpenAPI document that tools and the API fuzz read, with no hand-written schema; uvicorn is
already what the MCP SDK runs on. Endpoints call ``servers.params`` and return the search
library's JSON contract; the page at ``/`` is one static HTML file with a little JavaScript.

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

import json
import logging
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from importlib.resources import files
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.errors import BadData, InvalidRequest, MemsyncError, closest
from memsync.config.filters import FilterParam
from memsync.config.formats.worker_status import DEFAULT_MAX_LAG_S
from memsync.config.kinds import KIND_BY_NAME, KIND_NAMES, KindFilter, choice_for, plural
from memsync.config.limits import MAX_LIMIT, MAX_OFFSET, MAX_WINDOW_DAYS
from memsync.config.records import MAX_ROW_ID, format_ref
from memsync.config.settings import Settings
from memsync.search import QueryTimeout, Searcher, SearchError, VectorUnavailable
from memsync.search.models import Result
from memsync.search.projects import project_counts
from memsync.search.request import SearchFields
from memsync.search.snippets import of_result
from memsync.search.sql import SourceRows
from memsync.servers.hosts import TOKEN_REFUSAL, HostGuard, HostRule, bearer_ok, check_binding
from memsync.servers.params import MAX_DEPTH, Requests, filter_fields, offering_filters
from memsync.servers.redact import public
from memsync.servers.render import days_text
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


class Metrics:
    """The server's own Prometheus figures, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("memsync_http_requests", "HTTP requests by route and status.",
                                ["route", "status"], registry=self.registry)
        self.seconds = Histogram("memsync_http_request_seconds", "HTTP request latency by route.", ["route"],
                                 registry=self.registry,
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.modes = Counter("memsync_search_answers", "Search answers by the mode that produced them.",
                             ["mode"], registry=self.registry)


def page_html(settings: Settings) -> str:
    """The search page with what the server owns filled in: the default window (a setting), and
    the kind choices, reference letters and accepted kind names (the one table of kind names)."""
    options = "".join(f'\n      <option value="{plural(k)}">{plural(k)}</option>' for k in KINDS)
    letters = {kind.value: name.ref_letter for kind, name in KIND_NAMES.items()}
    return (files("memsync.servers").joinpath("page/index.html").read_text(encoding="utf-8")
            .replace("{window_default}", days_text(settings.window_days))
            .replace("{kind_options}", options)
            .replace("{kind_letters}", json.dumps(letters))
            .replace("{kind_choices}", json.dumps({name: choice_for(name) for name in KIND_BY_NAME})))


def with_snippet(result: Result, shown: dict[str, Any], query: str, full: bool) -> dict[str, Any]:
    """A result's JSON with its ``snippet`` (None when the record has no text); its full record
    only when ``full`` asked for it."""
    snip = of_result(result, query)
    out = {**shown, "snippet": None if snip is None else snip.to_json()}
    if not full:
        out.pop("record", None)
    return out


def filter_query(param: FilterParam) -> Any:
    """A filter's query parameter: one value, or (for a list filter) repeated (``type=a&type=b``)."""
    kind = list[str] | None if param.shape == "list" else str | None
    return Annotated[kind, Query(description=param.help)]


def create_app(settings: Settings, searcher: Searcher | None = None, host: str | None = None,
               port: int | None = None) -> FastAPI:
    """The FastAPI application on one shared Searcher (closed when the app shuts down), answering
    the names of a server on ``host:port`` (default ``serve_host:serve_port``)."""
    searcher = searcher or Searcher(settings)
    requests = Requests(searcher, settings.max_query_chars)
    metrics = Metrics()
    page = page_html(settings)
    token = settings.bearer_token

    app = FastAPI(title="memsync", version=version("memsync"), docs_url=None, redoc_url=None,
                  description="Search an AI coding agent's memory (claude-mem): hybrid semantic + full-text "
                              "search, timelines, records and status. JSON in the `memsync search --json` contract.")
    app.router.on_shutdown.append(searcher.close)

    def authorized(request: Request) -> None:
        # The rule of both servers (servers.hosts); here per route, as /, /healthz and the
        # OpenAPI document need no token.
        if not bearer_ok(request.headers.get("authorization"), token):
            raise HTTPException(401, TOKEN_REFUSAL, headers={"WWW-Authenticate": "Bearer"})

    guarded = [Depends(authorized)]

    # Outermost last: measure → HEAD as GET → HostGuard → CORS (configured origins only) → BodyLimit → routes.
    rule = HostRule.of(settings, host or settings.serve_host, port or settings.serve_port)
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

    @app.get("/", include_in_schema=False)
    def index() -> HTMLResponse:
        return HTMLResponse(page)

    @app.get("/healthz", summary="Liveness: the server answers")
    def healthz() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/metrics", dependencies=guarded, summary="Prometheus metrics of this server")
    def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/api/search", dependencies=guarded, summary="Hybrid search over observations, summaries and prompts")
    @offering_filters(filter_query, KINDS)  # project, platform, type, ...: declared in config.filters
    def api_search(
        q: Annotated[str, Query(description="Query text; empty lists the newest records.")] = "",
        kind: Annotated[KindFilter, Query(description="Which records ('sessions' is accepted for summaries).")] = "all",
        window_days: Annotated[int | None, Query(ge=0, le=MAX_WINDOW_DAYS,
                                                 description="Recency window; 0 = all time.")] = None,
        order: Annotated[Literal["relevance", "newest", "oldest"], Query()] = "relevance",
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 10,
        offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
        full: Annotated[bool, Query(description="Include each full record.")] = False,
        all: Annotated[bool, Query(description="Also list the results below the confidence cutoff "  # noqa: A002
                                               "(min_confidence).")] = False,
        snippets: Annotated[bool, Query(description="Give each result a `snippet`: a short piece of its best "
                                                    "field with the query's words marked "
                                                    "(`{text, highlights: [[start, end], ...], field}`).")] = False,
        **filters: Any,
    ) -> dict[str, Any]:
        # Snippets read the full rows the page's hydration fetches anyway (one query per kind).
        resp = requests.search(SearchFields(query=q, kind=kind, filters=filter_fields(filters), window_days=window_days,
                                            order=order, limit=limit, offset=offset, full=full or snippets, all=all))
        metrics.modes.labels(resp.mode.value).inc()
        body = {**resp.to_json(), "reason": public(resp.reason, settings), "limit": limit, "offset": offset}
        if snippets:
            body["results"] = [with_snippet(r, shown, q, full) for r, shown in zip(resp.results, body["results"],
                                                                                   strict=True)]
        return body

    @app.get("/api/projects", dependencies=guarded, summary="Projects with their row counts, most rows first")
    def api_projects() -> list[dict[str, Any]]:
        rows = SourceRows.open(settings)
        try:
            return [c.to_json() for c in project_counts(rows)]
        finally:
            rows.close()

    @app.get("/api/timeline", dependencies=guarded, summary="Records around an anchor, oldest first")
    def api_timeline(
        anchor: Annotated[str | None, Query(description="123 / S12 / P5 / ISO time.")] = None,
        q: Annotated[str | None, Query(description="Instead of an anchor: its best match.")] = None,
        before: Annotated[int, Query(ge=0, le=MAX_DEPTH)] = 5,
        after: Annotated[int, Query(ge=0, le=MAX_DEPTH)] = 5,
        project: Annotated[str | None, Query()] = None,
    ) -> dict[str, Any]:
        results, key = requests.timeline(anchor, q, before, after, project)
        return {"anchor": {"kind": key[0].value, "id": key[1], "ref": format_ref(*key)},
                "results": [r.to_json() for r in results]}

    @app.get("/api/records/{kind}/{record_id}", dependencies=guarded, summary="One full record")
    def api_record(kind: Annotated[Kind, Path()],
                   record_id: Annotated[int, Path(ge=1, le=MAX_ROW_ID)]) -> dict[str, Any]:
        records, _ = searcher.get(Kind(kind), [record_id])
        if not records:
            raise HTTPException(404, f"no {kind} with id {record_id}")
        return records[0]

    @app.get("/api/similar/{observation_id}", dependencies=guarded, summary="Past work like an observation")
    def api_similar(observation_id: Annotated[int, Path(ge=1, le=MAX_ROW_ID)],
                    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 10,
                    window_days: Annotated[int, Query(ge=0, le=MAX_WINDOW_DAYS)] = 0) -> dict[str, Any]:
        try:
            results, mode, reason = requests.similar(observation_id, limit, window_days)
        except SearchError as exc:  # the library's "no observation N" (BadRequest is one too)
            if str(exc).startswith("no observation"):
                raise HTTPException(404, str(exc)) from None
            raise
        return {"observation": observation_id, "mode": mode, "reason": public(reason, settings),
                "near_duplicate_threshold": settings.near_duplicate, "results": [r.to_json() for r in results]}

    @app.get("/api/status", dependencies=guarded,
             summary="Worker state, lag, Chroma reachability, counts, and the health verdict")
    def api_status(max_lag: Annotated[float, Query(ge=0, description="Seconds of lag the health verdict "
                                                   "tolerates, as `memsync status --check --max-lag`.")]
                   = DEFAULT_MAX_LAG_S) -> dict[str, Any]:
        from memsync.worker.status import status, verdict

        state = status(settings)
        report = state.as_dict()
        worker = {k: public(v, settings) if isinstance(v, str) else v
                  for k, v in report["worker"].items() if k != "db"}
        failures = [{**f, "reason": public(f.get("reason"), settings)} for f in report["failures"]]
        health = verdict(state, max_lag)
        try:
            searcher.vector.ensure()
            reachable, reason = True, None
        except VectorUnavailable as exc:
            reachable, reason = False, public(str(exc), settings)
        return {**report, "worker": worker, "failures": failures,
                "chroma": {"reachable": reachable, "reason": reason, "mode": settings.chroma_mode},
                "health": {"healthy": health.healthy, "problems": [public(p, settings) for p in health.problems]}}

    return app


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
