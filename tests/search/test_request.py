"""search.request: the one parser every front end builds its SearchRequest with, and its limit policy."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.limits import MAX_DEPTH
from memsync.search import Filters, Format, Order, SearchRequest
from memsync.search.request import BadRequest, RequestParser, SearchFields

PARSER = RequestParser(40, lambda: ["bugfix", "decision"])


class TestRequestParser:
    def test_fields_become_one_request(self) -> None:
        got = PARSER.request(SearchFields(
            query="pool", kind="prompts", filters={"project": " alpha ", "platform": " codex ", "types": "bugfix",
                                                   "concepts": ["gotcha", " "], "files": "x.py",
                                                   "date_from": "2026-11-01"},
            window_days=0, order="NEWEST", limit=100, offset=10_000, full=True))
        assert got == SearchRequest(
            query="pool", kinds=(Kind.PROMPT,), window_days=0, order=Order.NEWEST, limit=100, offset=10_000,
            format=Format.FULL,
            filters=Filters(project="alpha", platform="codex", types=("bugfix",), concepts=("gotcha",),
                            files=("x.py",), date_from=datetime(2026, 11, 1, tzinfo=UTC)))

    def test_absent_fields_take_the_requests_defaults(self) -> None:
        assert PARSER.request(SearchFields()) == SearchRequest(kinds=KINDS)

    @pytest.mark.parametrize(("fields", "message"), [
        ({"limit": 0}, "limit must be an integer from 1 to 100, got 0"),
        ({"limit": 101}, "limit must be an integer from 1 to 100, got 101"),
        ({"limit": "5"}, "limit must be an integer from 1 to 100, got '5'"),
        ({"offset": 10_001}, "offset must be an integer from 0 to 10000, got 10001"),
        ({"window_days": -1}, "window_days must be an integer from 0 to 36500"),
        ({"query": "x" * 41}, "query is 41 characters; the limit is 40"),
        ({"query": 5}, "query must be a string"),
        ({"kind": "bogus"}, "unknown kind 'bogus'"),
        ({"kind": 3}, "kind must be a name or a list of names"),
        ({"filters": {"types": "feature"}}, "unknown observation type 'feature'; this database has: bugfix, decision"),
        ({"filters": {"concepts": 7}}, "concept must be a string or a list of strings"),
        ({"filters": {"project": ["a"]}}, "project must be a string"),
        ({"order": "best"}, "order must be relevance, newest or oldest, got 'best'"),
        ({"filters": {"date_from": "yesterday"}}, "date_from must be an ISO date"),
        ({"filters": {"date_from": "2026-11-02", "date_to": "2026-11-01"}}, "date_from is after date_to"),
    ])
    def test_a_bad_value_is_refused_by_name(self, fields: dict[str, Any], message: str) -> None:
        with pytest.raises(BadRequest, match=message):
            PARSER.request(fields)  # type: ignore[arg-type]

    def test_timeline_depths_have_one_bound_for_every_front_end(self) -> None:
        """config.limits.MAX_DEPTH: the CLI's --before/--after, the HTTP API and the MCP tools."""
        assert PARSER.depths(0, MAX_DEPTH) == (0, MAX_DEPTH)
        for before, after, message in ((MAX_DEPTH + 1, 5, f"depth_before must be an integer from 0 to {MAX_DEPTH}"),
                                       (5, -1, "depth_after must be an integer from 0 to"),
                                       (True, 5, "depth_before must be an integer")):
            with pytest.raises(BadRequest, match=message):
                PARSER.depths(before, after)
