"""The search endpoints: hybrid search (the JSON of ``memsync search --json``) and the projects
a search can be narrowed to."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Query

from memsync.config.claude_mem.schema import KINDS
from memsync.config.filters import FilterParam
from memsync.config.kinds import KindFilter
from memsync.config.limits import MAX_LIMIT, MAX_OFFSET, MAX_WINDOW_DAYS
from memsync.search.models import Result
from memsync.search.projects import project_counts
from memsync.search.request import SearchFields
from memsync.search.snippets import of_result
from memsync.search.sql import SourceRows
from memsync.servers.endpoints.kit import ApiKit
from memsync.servers.params import filter_fields, offering_filters
from memsync.servers.redact import public


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


def register(api: ApiKit) -> None:
    """/api/search and /api/projects."""
    settings, requests = api.settings, api.requests

    @api.app.get("/api/search", dependencies=api.guarded,
                 summary="Hybrid search over observations, summaries and prompts")
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
        api.metrics.modes.labels(resp.mode.value).inc()
        body = {**resp.to_json(), "reason": public(resp.reason, settings), "limit": limit, "offset": offset}
        if snippets:
            body["results"] = [with_snippet(r, shown, q, full) for r, shown in zip(resp.results, body["results"],
                                                                                   strict=True)]
        return body

    @api.app.get("/api/projects", dependencies=api.guarded, summary="Projects with their row counts, most rows first")
    def api_projects() -> list[dict[str, Any]]:
        rows = SourceRows.open(settings)
        try:
            return [c.to_json() for c in project_counts(rows)]
        finally:
            rows.close()
