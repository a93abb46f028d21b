"""The record endpoints: a timeline around an anchor, one full record, and past work like an
observation."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import HTTPException, Path, Query

from memsync.config.claude_mem.schema import Kind
from memsync.config.limits import MAX_DEPTH, MAX_LIMIT, MAX_WINDOW_DAYS
from memsync.config.records import MAX_ROW_ID, format_ref
from memsync.search import SearchError
from memsync.servers.endpoints.kit import ApiKit
from memsync.servers.redact import public


def register(api: ApiKit) -> None:
    """/api/timeline, /api/records/{kind}/{record_id} and /api/similar/{observation_id}."""
    settings, requests = api.settings, api.requests

    @api.app.get("/api/timeline", dependencies=api.guarded, summary="Records around an anchor, oldest first")
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

    @api.app.get("/api/records/{kind}/{record_id}", dependencies=api.guarded, summary="One full record")
    def api_record(kind: Annotated[Kind, Path()],
                   record_id: Annotated[int, Path(ge=1, le=MAX_ROW_ID)]) -> dict[str, Any]:
        records, _ = api.searcher.get(Kind(kind), [record_id])
        if not records:
            raise HTTPException(404, f"no {kind} with id {record_id}")
        return records[0]

    @api.app.get("/api/similar/{observation_id}", dependencies=api.guarded, summary="Past work like an observation")
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
