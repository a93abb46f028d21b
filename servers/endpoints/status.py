"""The status endpoint: the worker's state and lag, Chroma's reachability, the counts, and the
health verdict of ``memsync status --check``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from memsync.config.formats.worker_status import DEFAULT_MAX_LAG_S
from memsync.search import VectorUnavailable
from memsync.servers.endpoints.kit import ApiKit
from memsync.servers.redact import public


def register(api: ApiKit) -> None:
    """/api/status."""
    settings, searcher = api.settings, api.searcher

    @api.app.get("/api/status", dependencies=api.guarded,
                 summary="Worker state, lag, Chroma reachability, counts, and the health verdict")
    def api_status(max_lag: Annotated[float, Query(ge=0, description="Seconds of lag the health verdict "
                                                   "tolerates, as `memsync status --check --max-lag`.")]
                   = DEFAULT_MAX_LAG_S) -> dict[str, Any]:
        from memsync.worker.checks.status import status, verdict

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
