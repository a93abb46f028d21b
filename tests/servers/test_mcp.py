"""`memsync mcp` as a subprocess, driven by the MCP SDK's own stdio client: every tool against a
real database synced into a real `chroma run` server, then with the vector sidecar down; the
tools' titles, annotations and output schemas, and structured content that validates against
them and says what the markdown says."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import jsonschema
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult, Tool

from memsync.config.settings import Settings
from tests.conftest import free_port
from tests.servers.conftest import MEMSYNC, ROOT, mcp_over_http, server_env

pytestmark = pytest.mark.slow
T = TypeVar("T")

TOOLS = {"search", "search_observations", "search_sessions", "search_user_prompts", "find_by_concept",
         "find_by_file", "find_by_type", "timeline", "recent_context", "get_observations", "find_similar"}


def session(settings: Settings, body: Callable[[Client], Awaitable[T]]) -> T:
    """Start `memsync mcp` over stdio, run ``body`` with a connected client, stop the server."""
    # Structured content on unless the test's settings say (it is off by default: see docs/servers.md).
    on = {} if "mcp_structured" in settings.model_fields_set else {"MEMSYNC_MCP_STRUCTURED": "true"}
    params = StdioServerParameters(command=MEMSYNC, args=["mcp"], env=server_env(settings, **on), cwd=ROOT)

    async def run() -> T:
        async with Client(params, read_timeout_seconds=120) as client:
            return await body(client)

    return asyncio.run(run())


def text_of(result: CallToolResult) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


async def call(client: Client, tool: str, **args: Any) -> tuple[bool, str]:
    result = await client.call_tool(tool, args)
    return bool(result.is_error), text_of(result)


def refs(text: str) -> list[str]:
    """The record ids of the index rows, in order."""
    return re.findall(r"^\| (#[SP]?\d+) \|", text, flags=re.M)


def test_every_tool_against_a_real_database(served: Settings) -> None:
    async def body(client: Client) -> dict[str, tuple[bool, str]]:
        listed = await client.list_tools()
        out: dict[str, tuple[bool, str]] = {"tools": (False, "\n".join(
            f"{t.name}: {t.description}" for t in listed.tools))}
        out["schema"] = (False, str(next(t for t in listed.tools if t.name == "search").input_schema))
        out["search"] = await call(client, "search", query="upload retries", limit=5)
        out["search_page2"] = await call(client, "search", query="upload retries", limit=2, offset=2)
        out["search_all_time"] = await call(client, "search", query="billing exports nightly", window_days=0)
        out["search_window"] = await call(client, "search", query="billing exports nightly")
        out["search_full"] = await call(client, "search", query="retry budget", limit=1, format="full")
        # The platform filter's tests list past the cutoff: a filter changes the candidates, and so
        # the confidences the model reads.
        out["search_claude"] = await call(client, "search", query="upload retries", platform="Claude Code", limit=3,
                                          all=True)
        out["search_everything"] = await call(client, "search", query="upload retries", limit=5, all=True)
        out["search_codex"] = await call(client, "search", query="upload retries", platform="codex")
        out["obs"] = await call(client, "search_observations", query="uploads", project="alpha")
        out["sessions"] = await call(client, "search_sessions", query="uploads session")
        out["prompts"] = await call(client, "search_user_prompts", query="uploads fail")
        out["obs_codex"] = await call(client, "search_observations", query="uploads", platform="codex")
        out["sessions_claude"] = await call(client, "search_sessions", query="uploads session", platform="claude",
                                            all=True)
        out["sessions_all"] = await call(client, "search_sessions", query="uploads session", all=True)
        out["prompts_codex"] = await call(client, "search_user_prompts", query="uploads fail", platform="codex")
        out["concept"] = await call(client, "find_by_concept", concept="pattern")
        out["file"] = await call(client, "find_by_file", path="uploads/retry.py")
        out["type"] = await call(client, "find_by_type", type="decision")
        out["timeline"] = await call(client, "timeline", anchor="#4", depth_before=1, depth_after=1)
        out["timeline_query"] = await call(client, "timeline", query="dark mode colors", depth_before=0,
                                           depth_after=0)
        out["recent"] = await call(client, "recent_context", limit=3)
        out["get"] = await call(client, "get_observations", ids=["1", "#S1", "P1", "999"])
        out["similar"] = await call(client, "find_similar", observation_id=4, limit=3)
        return out

    got = session(served, body)
    names = {line.split(":")[0] for line in got["tools"][1].splitlines() if ":" in line and " " not in
             line.split(":")[0]}
    assert names == TOOLS
    assert "Short queries" in got["tools"][1] or "few key words" in got["schema"][1] + got["tools"][1]
    assert "limit" in got["schema"][1] and "window_days" in got["schema"][1]

    for name, (is_error, text) in got.items():
        assert not is_error, f"{name}: {text}"
    search_text = got["search"][1]
    assert search_text.startswith("mode: hybrid") and "window: last 90 days" in search_text
    assert refs(search_text)[0] in ("#1", "#4", "#P1", "#S1") and "#5" not in refs(search_text)
    assert set(refs(got["search_page2"][1])).isdisjoint(refs(got["search"][1])[:2])
    assert refs(got["search_all_time"][1])[0] == "#5"
    assert "#5" not in refs(got["search_window"][1]) and "outside the window" in got["search_window"][1]
    assert "**narrative**: The retry budget" in got["search_full"][1]
    # Every session here was recorded by claude ("Claude Code" is the same platform, normalised).
    assert refs(got["search_claude"][1]) == refs(got["search_everything"][1])[:3]
    assert not refs(got["search_codex"][1])
    # all=true lists what the cutoff leaves out of the default list, which says how many.
    below = re.search(r"(\d+) below the cutoff; all=true to show", got["search"][1])
    assert below is not None and len(refs(got["search_everything"][1])) > len(refs(got["search"][1]))
    assert refs(got["obs"][1]) and all(r[1].isdigit() for r in refs(got["obs"][1]))
    assert "#2" not in refs(got["obs"][1])  # project beta filtered out
    assert refs(got["sessions"][1])[0] == "#S1" and all(r.startswith("#S") for r in refs(got["sessions"][1]))
    assert refs(got["prompts"][1])[0] == "#P1" and all(r.startswith("#P") for r in refs(got["prompts"][1]))
    # The narrower search tools take the platform too.
    assert not refs(got["obs_codex"][1]) and not refs(got["prompts_codex"][1])
    assert refs(got["sessions_claude"][1]) == refs(got["sessions_all"][1])
    assert refs(got["concept"][1]) == ["#2"]
    assert refs(got["file"][1]) == ["#1"]
    assert refs(got["type"][1]) == ["#3"]
    assert "◀ anchor" in got["timeline"][1] and len(refs(got["timeline"][1])) == 3
    assert re.search(r"\| #4 \|.*◀ anchor", got["timeline"][1])
    assert refs(got["timeline_query"][1]) == ["#2"]
    assert len(refs(got["recent"][1])) == 3
    get_text = got["get"][1]
    assert get_text.index("## #1 ") < get_text.index("## #S1 ") < get_text.index("## #P1 ")
    assert "Not found: #999" in get_text and "why do uploads fail" in get_text
    assert got["similar"][1].startswith("Similar to #4 · mode: semantic") and "#4 " not in refs(got["similar"][1])


TITLES = {"search": "Search memory", "get_observations": "Get full records", "timeline": "Timeline around a record"}


def table_rows(text: str) -> list[list[str]]:
    """The cells of the markdown index rows (id first), in order."""
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in text.splitlines() if line.startswith("| #")]


def agrees(hits: list[dict[str, Any]], text: str, scored: bool) -> None:
    """Each structured hit says what its markdown row says: id, type, date, score or project, title."""
    rows = table_rows(text)
    assert [h["ref"] for h in hits] == [r[0] for r in rows] and hits
    for h, row in zip(hits, rows, strict=True):
        assert row[1] == h["type"]
        assert row[2] == h["date"][:16].replace("T", " ")  # local time, the text to the minute
        if scored and "score" in h:  # the confidence
            assert float(row[3].split()[0]) == pytest.approx(h["score"], abs=0.0051)
            assert row[4] == h["found_by"]
        elif scored:  # no confidence (a filter's listing, find_similar): the cosine, or a dash
            assert row[3] == (f"cos {h['similarity']:.2f}" if "similarity" in h else "-")
            assert row[4] == h["found_by"]
        else:
            assert row[3] == h["project"]
        assert row[-1].replace(" **◀ anchor**", "").replace(" **(near-duplicate)**", "") == h["title"]
        assert ("◀ anchor" in row[-1]) == (h.get("mark") == "anchor")


def test_tools_carry_titles_read_only_annotations_and_output_schemas(served: Settings) -> None:
    async def body(client: Client) -> list[Tool]:
        return (await client.list_tools()).tools

    for tool in session(served, body):
        assert tool.title and tool.title != tool.name, tool.name
        assert TITLES.get(tool.name, tool.title) == tool.title
        a = tool.annotations
        assert a is not None and (a.read_only_hint, a.open_world_hint) == (True, False), tool.name
        assert (a.destructive_hint, a.idempotent_hint) == (False, True), tool.name
        schema = tool.output_schema
        assert schema is not None and schema["type"] == "object", tool.name
        jsonschema.Draft202012Validator.check_schema(schema)
        assert {"results"} <= set(schema["required"]) or {"records", "missing"} <= set(schema["required"])


def test_structured_content_validates_against_the_schema_and_matches_the_text(served: Settings) -> None:
    calls: dict[str, tuple[str, dict[str, Any]]] = {
        "search": ("search", {"query": "upload retries", "limit": 2}),
        "window": ("search", {"query": "billing exports nightly"}),
        "full": ("search", {"query": "retry budget", "limit": 1, "format": "full"}),
        "type": ("find_by_type", {"type": "decision"}),
        "timeline": ("timeline", {"anchor": "#4", "depth_before": 1, "depth_after": 1}),
        "recent": ("recent_context", {"limit": 3}),
        "get": ("get_observations", {"ids": ["1", "#S1", "P1", "999"]}),
        "similar": ("find_similar", {"observation_id": 4, "limit": 3}),
    }

    async def body(client: Client) -> tuple[dict[str, Any], dict[str, CallToolResult]]:
        schemas = {t.name: t.output_schema for t in (await client.list_tools()).tools}
        # The SDK client itself checks each answer against the listed schema (and raises on a mismatch).
        return schemas, {key: await client.call_tool(tool, args) for key, (tool, args) in calls.items()}

    schemas, got = session(served, body)
    sc: dict[str, dict[str, Any]] = {}
    for key, result in got.items():
        assert not result.is_error and result.structured_content is not None, key
        jsonschema.validate(result.structured_content, schemas[calls[key][0]])
        sc[key] = result.structured_content
    text = {key: text_of(result) for key, result in got.items()}

    s = sc["search"]
    assert text["search"].startswith(f"mode: {s['mode']} · window: last {s['window']['days']} days")
    assert s["window"]["source"] == "window" and s["offset"] == 0
    assert f"results 1-2 of {s['total']}" in text["search"] and f"More: offset={s['next_offset']}." in text["search"]
    agrees(s["results"], text["search"], scored=True)
    w = sc["window"]
    assert w["excluded_by_window"] >= 1 and f"{w['excluded_by_window']} older matches" in text["window"]
    assert "reason" not in s and None not in s.values()  # absent values are left out, not sent as null
    full = sc["full"]["results"][0]
    assert full["record"]["narrative"] in text["full"] and text["full"].count("\n## ") == 1
    agrees(sc["type"]["results"], text["type"], scored=True)
    assert sc["timeline"]["anchor"] == "#4" and text["timeline"].startswith("Timeline around #4 (3 records")
    agrees(sc["timeline"]["results"], text["timeline"], scored=False)
    agrees(sc["recent"]["results"], text["recent"], scored=False)
    g = sc["get"]
    assert [r["ref"] for r in g["records"]] == re.findall(r"^## (#[SP]?\d+) ", text["get"], flags=re.M)
    assert [r["ref"] for r in g["records"]] == ["#1", "#S1", "#P1"] and g["records"][2]["kind"] == "prompt"
    assert g["missing"] == ["#999"] and "Not found: #999" in text["get"]
    assert g["records"][0]["narrative"] in text["get"]
    sim = sc["similar"]
    assert text["similar"].startswith(f"Similar to {sim['observation']} · mode: {sim['mode']}")
    agrees(sim["results"], text["similar"], scored=True)


def test_the_client_refuses_structured_content_the_schema_does_not_allow(served: Settings) -> None:
    """The check above is real: the SDK client validates every answer against the listed schema,
    so a server whose content strays from its declared schema makes the call raise."""
    from memsync.search import Searcher
    from memsync.servers.mcp_tools import build_server

    searcher = Searcher(served)
    server = build_server(served.model_copy(update={"mcp_structured": True}), searcher)
    metadata = server._tool_manager.get_tool("search").fn_metadata  # type: ignore[union-attr]
    # Declare one more required field than the tool sends; the server still sends its model.
    metadata.output_schema = {**metadata.output_schema, "required": [*metadata.output_schema["required"], "x"]}

    async def run() -> None:
        async with Client(server) as client:
            await client.list_tools()
            with pytest.raises(RuntimeError, match="Invalid structured content returned by tool search"):
                await client.call_tool("search", {"query": "upload retries"})
            assert not (await client.call_tool("timeline", {"anchor": "#4"})).is_error  # the others still pass

    try:
        asyncio.run(run())
    finally:
        searcher.close()


def test_structured_content_is_off_by_default(served: Settings) -> None:
    """By default (mcp_structured=false): no output schema and no structured content, the same
    markdown, the titles and annotations kept (Claude Code would show the model the JSON instead)."""
    from memsync.search import Searcher
    from memsync.servers.mcp_tools import build_server

    searcher = Searcher(served)

    async def run(settings: Settings) -> tuple[list[Tool], CallToolResult]:
        async with Client(build_server(settings, searcher)) as client:
            return (await client.list_tools()).tools, await client.call_tool("timeline", {"anchor": "#4"})

    try:
        on_tools, on = asyncio.run(run(served.model_copy(update={"mcp_structured": True})))
        off_tools, off = asyncio.run(run(served))
    finally:
        searcher.close()
    assert all(t.output_schema is None for t in off_tools) and off.structured_content is None
    assert all(t.output_schema is not None for t in on_tools) and on.structured_content is not None
    assert [(t.title, t.annotations) for t in off_tools] == [(t.title, t.annotations) for t in on_tools]
    assert text_of(off) == text_of(on) and not off.is_error


def test_bad_values_get_a_clear_message_not_a_trace(served: Settings) -> None:
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("search", {"query": "x", "limit": -1}, "limit must be an integer from 1 to 100"),
        ("search", {"query": "x", "offset": -5}, "offset must be"),
        ("search", {"type": "nonsense"}, "unknown observation type 'nonsense'; this database has: bugfix"),
        ("find_by_type", {"type": "nonsense"}, "unknown observation type"),
        ("search", {"date_from": "last tuesday"}, "date_from must be an ISO date"),
        ("search", {"date_from": "2026-02-01", "date_to": "2026-01-01"}, "date_from is after date_to"),
        ("search", {"window_days": -3}, "window_days must be"),
        ("search", {"query": "x" * 5000}, "the limit is 4000"),
        ("search", {"order": "sideways"}, "relevance"),
        ("get_observations", {"ids": ["abc"]}, "not a record id"),
        ("get_observations", {"ids": []}, "at least one id"),
        ("find_similar", {"observation_id": 999}, "no observation with id 999"),
        ("find_similar", {"observation_id": "S1"}, "takes an observation id"),
        ("timeline", {"anchor": "#999"}, "no observation with id 999"),
        ("timeline", {}, "give an anchor"),
        ("timeline", {"anchor": "1", "depth_before": 500}, "depth_before must be an integer from 0 to 50"),
        # Before: ids past SQLite's int64 answered an empty error; id-shaped anchors became queries.
        ("find_similar", {"observation_id": 10**30}, "record id 1000000000000000000000000000000 is out of range"),
        ("find_similar", {"observation_id": "#" + "9" * 25}, "is out of range"),
        ("get_observations", {"ids": [10**30, 1]}, "is out of range"),
        ("timeline", {"anchor": "0"}, "record id '0' is out of range"),
        ("timeline", {"anchor": "S0"}, "record id 'S0' is out of range"),
        ("timeline", {"anchor": "P-1"}, "record id 'P-1' is out of range"),
        ("timeline", {"anchor": "9" * 20}, "is out of range"),
        ("find_similar", {"observation_id": 5, "limit": 10**30}, "limit must be an integer from 1 to 100, got 1000"),
        ("search", {"window_days": 10**30}, "window_days must be an integer from 0 to 36500"),
    ]

    async def body(client: Client) -> list[CallToolResult]:
        return [await client.call_tool(tool, args) for tool, args, _ in cases]

    for (tool, args, expected), result in zip(cases, session(served, body), strict=True):
        text = text_of(result)
        assert result.is_error, f"{tool} {args} was accepted: {text[:200]}"
        assert expected in text, f"{tool} {args}: {text}"
        assert "Traceback" not in text and "File \"" not in text
        # An error carries no structured content, and the client checks none against the schema.
        assert result.structured_content is None


def test_tools_work_with_the_vector_sidecar_down(served: Settings, tmp_path: Any) -> None:
    # Same database; managed mode on a data directory whose server is not running.
    down = served.model_copy(update={"data_dir": tmp_path / "no-server", "chroma_port": free_port()})

    async def body(client: Client) -> dict[str, tuple[bool, str]]:
        return {"search": await call(client, "search", query="upload retries", window_days=0),
                "similar": await call(client, "find_similar", observation_id=4),
                "get": await call(client, "get_observations", ids=[1])}

    got = session(down, body)
    assert not any(err for err, _ in got.values()), got
    head = got["search"][1].splitlines()[0]
    assert head.startswith("mode: lexical_fallback (") and "no managed Chroma server" in head
    # The reason names the data directory without its path.
    assert "running for the data directory" in head, head
    assert not any(str(tmp_path) in text for _, text in got.values())
    assert {"#1", "#4"} <= set(refs(got["search"][1]))
    assert "mode: lexical_fallback" in got["similar"][1] and refs(got["similar"][1])
    assert "## #1 " in got["get"][1]


def test_streamable_http_transport_on_loopback(served: Settings) -> None:
    import httpx

    with mcp_over_http(served) as port:
        async def run() -> tuple[int, str]:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                tools = await client.list_tools()
                _, text = await call(client, "search_user_prompts", query="uploads fail")
                return len(tools.tools), text

        n, text = asyncio.run(run())
        assert n == len(TOOLS) and refs(text)[0] == "#P1" and text.startswith("mode: hybrid")

        # DNS rebinding: the HTTP API's rule (servers.hosts) refuses a foreign Host or Origin.
        listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        accept = {"Accept": "application/json, text/event-stream"}
        for headers, status in [({"Host": "attacker.example"}, 421),
                                ({"Host": f"attacker.example:{port}"}, 421),
                                ({"Origin": "http://attacker.example"}, 403),
                                ({"Origin": "http://localhost:3000"}, 403)]:
            r = httpx.post(f"http://127.0.0.1:{port}/mcp", json=listing, headers={**accept, **headers}, timeout=30)
            assert r.status_code == status, (headers, r.status_code, r.text)
            assert "search_user_prompts" not in r.text and "uploads" not in r.text
            assert ("allowed_hosts" if status == 421 else "allowed_origins") in r.json()["detail"]


def test_an_unexpected_error_gets_a_fixed_message_not_an_empty_one(tmp_path: Any) -> None:
    """An OverflowError inside a tool used to reach the agent as an empty error."""
    from typing import cast

    from memsync.search import Searcher
    from memsync.servers.mcp_tools import build_server

    class Broken:
        def similar(self, *args: Any) -> Any:
            raise OverflowError("Python int too large to convert to SQLite INTEGER")

    settings = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data")

    async def run() -> CallToolResult:
        async with Client(build_server(settings, cast(Searcher, Broken()))) as client:
            return await client.call_tool("find_similar", {"observation_id": 5})

    result = asyncio.run(run())
    assert result.is_error and text_of(result).endswith(": internal error (details are in the server's log)")
