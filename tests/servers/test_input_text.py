"""Text and values at the servers' boundary, without a server: unpaired surrogates (in Python text
and escaped in JSON), the one-line message for arguments of the wrong type, timeline anchors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from memsync.config.records import RecordRefError, parse_record_ref
from memsync.search.request import BadRequest, RequestParser, valid_unicode
from memsync.servers.claude_mem_tools import record_id, whole
from memsync.servers.mcp_boundary import argument_errors
from memsync.servers.params import checked_anchor
from memsync.servers.wire import lone_surrogates_replaced, valid_utf8


@pytest.mark.parametrize(("text", "expected"), [
    ("plain", "plain"),
    ("a\ud800b", "a\ufffdb"),
    ("\udced\udca0\udc80", "\ufffd" * 3),  # argv bytes ED A0 80, kept by Python as lone surrogates
    ("\ud83d\ude00", "\U0001f600"),  # a pair as two code points: the character it encodes
    ("\ude00\ud83d", "\ufffd\ufffd"),  # the wrong order is no pair
])
def test_valid_unicode_replaces_unpaired_surrogates(text: str, expected: str) -> None:
    assert valid_unicode(text) == expected
    valid_unicode(text).encode("utf-8")  # what the tokenizer, SQLite and a JSON answer need


def test_the_parser_reads_every_text_as_valid_unicode() -> None:
    parser = RequestParser(4000, lambda: ["bugfix"])
    request = parser.request({"query": "x\ud800", "filters": {"project": "\udc00p"}})
    assert request.query == "x\ufffd" and request.filters.project == "\ufffdp"


@pytest.mark.parametrize(("raw", "expected"), [
    (rb'{"q":"\ud800"}', "\ufffd"),
    (rb'{"q":"\udc00x\uD800"}', "\ufffdx\ufffd"),
    (rb'{"q":"\ud83d\ude00"}', "\U0001f600"),  # a pair is kept
    (rb'{"q":"\\ud800"}', "\\ud800"),  # an escaped backslash, then plain text
    (rb'{"q":"\\\ud800"}', "\\\ufffd"),  # an escaped backslash, then an escape
    (rb'{"q":"\u00e9"}', "\u00e9"),
])
def test_lone_surrogate_escapes_are_replaced_in_json_text(raw: bytes, expected: str) -> None:
    import mcp_types

    repaired = lone_surrogates_replaced(raw)
    assert json.loads(repaired)["q"] == expected
    line = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":' + repaired + b"}}"
    mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)  # the SDK's parser takes it


@pytest.mark.parametrize(("raw", "expected"), [
    (b'{"q":"conn\xff pool"}', "conn\ufffd pool"),
    (b'{"q":"\xed\xa0\x80"}', "\ufffd" * 3),  # an encoded surrogate is not UTF-8 either
    (b'{"q":"caf\xc3"}', "caf\ufffd"),  # a sequence cut short
    ('{"q":"caf\u00e9 \U0001f600"}'.encode(), "caf\u00e9 \U0001f600"),
])
def test_bytes_that_are_not_utf8_become_the_replacement_character(raw: bytes, expected: str) -> None:
    """An MCP body over HTTP with such bytes was a parse error with id null; stdio decodes them so."""
    from pydantic_core import from_json

    assert from_json(valid_utf8(raw))["q"] == expected  # the SDK's parser of a streamable-HTTP body
    assert valid_utf8(raw) == raw.decode("utf-8", "replace").encode()


def test_the_sdk_parser_refuses_a_lone_surrogate_escape() -> None:
    """The reproduction docs/servers.md gives the SDK's maintainers: when this starts passing, the
    repair in servers.wire is no longer needed."""
    import mcp_types

    line = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"q":"\\ud800"}}}'
    with pytest.raises(ValidationError, match="hex escape"):
        mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)


class Args(BaseModel):
    query: str = ""
    limit: int = 10
    ids: list[str | int] = []
    order: Any = None


@pytest.mark.parametrize(("args", "expected"), [
    ({"limit": "ten"}, "limit must be an integer, got 'ten'"),
    ({"query": 5}, "query must be a string, got 5"),
    ({"ids": [[1]]}, "ids[0] must be a string or an integer, got [1]"),
    ({"query": 5, "limit": "x"}, "query must be a string, got 5; limit must be an integer, got 'x'"),
])
def test_argument_errors_are_one_line(args: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Args(**args)
    assert argument_errors(caught.value) == expected


@pytest.mark.parametrize("anchor", ["12", "#S3", "P1", "2026-11-01", "2026-11-01T10:00:00Z"])
def test_an_anchor_is_an_id_or_a_time(anchor: str) -> None:
    assert checked_anchor(anchor) == anchor


@pytest.mark.parametrize(("anchor", "message"), [
    ("9999-12-31T99:99", "anchor must be a record id"),
    ("upload retries", "give them as query"),
    ("S0", "out of range"),
    ("١٢", "anchor must be a record id"),
])
def test_anything_else_as_an_anchor_is_refused(anchor: str, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        checked_anchor(anchor)


@pytest.mark.parametrize("text", ["١٢", "１２", "#S١"])
def test_record_ids_are_ascii_digits(text: str) -> None:
    with pytest.raises(RecordRefError, match="not a record id"):
        parse_record_ref(text)


def test_claude_mem_values_are_never_booleans_and_integers_stay_exact() -> None:
    assert record_id(2**63 - 1, "ids[0]") == 2**63 - 1 and record_id(7.0, "ids[0]") == 7
    assert record_id(" #S2 ", "ids[0]") == "#S2"
    for bad in (True, False, 1.5, None, [1], {"id": 1}):
        with pytest.raises(BadRequest, match="ids\\[0\\] must be a record id"):
            record_id(bad, "ids[0]")
    for bad in ("١٢", "１２", True):
        with pytest.raises(BadRequest, match="limit"):
            whole(bad, "limit", 20, 1, 100)


def test_memsync_tools_refuse_booleans_and_wrong_types_in_one_line(tmp_path: Any) -> None:
    """true was observation #1 (and a limit of 1); a wrong type was pydantic's report. Refused
    before the searcher is asked anything."""
    import asyncio
    from typing import cast

    from mcp import Client

    from memsync.config.settings import Settings
    from memsync.search import Searcher
    from memsync.servers.mcp_tools import build_server

    class Untouched:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"the searcher was asked for {name}")

    calls: list[tuple[str, dict[str, Any], str]] = [
        ("get_observations", {"ids": [True]}, "ids must be a record id (123, #123, S12, P5), not true or false"),
        ("find_similar", {"observation_id": True}, "observation_id must be a record id"),
        ("search", {"limit": True}, "limit must be an integer, not true or false, got True"),
        ("timeline", {"anchor": "1", "depth_before": False}, "depth_before must be an integer, not true or false"),
        ("search", {"limit": "ten"}, "limit must be an integer, got 'ten'"),
        ("search", {"query": 5}, "query must be a string, got 5"),
        ("search", {"order": "sideways"}, "order must be one of 'relevance', 'newest' or 'oldest'"),
    ]
    server = build_server(Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data"),
                          cast(Searcher, Untouched()))

    async def run() -> list[tuple[bool, str]]:
        async with Client(server) as client:
            listed = {t.name: t.input_schema for t in (await client.list_tools()).tools}
            assert listed["search"]["properties"]["limit"]["type"] == "integer"  # the schema is unchanged
            out = []
            for tool, args, _ in calls:
                result = await client.call_tool(tool, args)
                out.append((bool(result.is_error), "\n".join(getattr(c, "text", "") for c in result.content)))
            return out

    for (tool, args, expected), (is_error, text) in zip(calls, asyncio.run(run()), strict=True):
        assert is_error and expected in text and "\n" not in text, (tool, args, text)
