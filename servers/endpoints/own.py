"""The server's own endpoints: the search page, liveness and its Prometheus metrics."""

from __future__ import annotations

import json
from importlib.resources import files

from fastapi.responses import HTMLResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from memsync.config.claude_mem.schema import KINDS
from memsync.config.kinds import KIND_BY_NAME, KIND_NAMES, choice_for, plural
from memsync.config.settings import Settings
from memsync.servers.endpoints.kit import ApiKit
from memsync.servers.render import days_text


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


def register(api: ApiKit) -> None:
    """/ (the page), /healthz and /metrics."""
    page = page_html(api.settings)

    @api.app.get("/", include_in_schema=False)
    def index() -> HTMLResponse:
        return HTMLResponse(page)

    @api.app.get("/healthz", summary="Liveness: the server answers")
    def healthz() -> dict[str, bool]:
        return {"ok": True}

    @api.app.get("/metrics", dependencies=api.guarded, summary="Prometheus metrics of this server")
    def prometheus() -> Response:
        return Response(generate_latest(api.metrics.registry), media_type=CONTENT_TYPE_LATEST)
