"""What every endpoint of the HTTP API is given: the app to add its routes to, the settings, the
validated requests (``servers.params``), the server's own metrics, and the dependency that asks
for the bearer token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from prometheus_client import CollectorRegistry, Counter, Histogram

from memsync.config.settings import Settings
from memsync.search import Searcher
from memsync.servers.hosts import TOKEN_REFUSAL, bearer_ok
from memsync.servers.params import Requests


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


def token_required(token: str | None) -> list[Any]:
    """The dependencies of a route that needs ``Authorization: Bearer`` when a token is set: the
    rule of both servers (``servers.hosts``), here per route, as /, /healthz and the OpenAPI
    document need no token."""

    def authorized(request: Request) -> None:
        if not bearer_ok(request.headers.get("authorization"), token):
            raise HTTPException(401, TOKEN_REFUSAL, headers={"WWW-Authenticate": "Bearer"})

    return [Depends(authorized)]


@dataclass(frozen=True)
class ApiKit:
    """One app's endpoints' shared state; ``guarded`` goes in a route's ``dependencies``."""

    app: FastAPI
    settings: Settings
    searcher: Searcher
    requests: Requests
    metrics: Metrics
    guarded: list[Any]
