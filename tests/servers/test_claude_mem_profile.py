"""`memsync mcp --profile claude-mem`: claude-mem's three search tools, answered by memsync.

The tool list is compared with the real claude-mem 13.25.3 MCP server (its published
``mcp-server.cjs`` on Bun, installed by ``make test``; it lists its tools without a worker), the
``mem-search`` skill's own example calls run on memsync's profile and on the real claude-mem (its
server and worker, on rows written through its ``/api/import``) and give answers of the same
shape, and no call ever returns a record of another kind than the id asked for.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult, Tool

from memsync.config.settings import Settings
from memsync.search import SearchRequest
from memsync.servers.claude_mem_tools import SCHEMAS, comma_list, date_value, whole
from memsync.servers.params import BadRequest
from memsync.worker.pipeline.resync import resync
from scripts.real_claude_mem import BUN, MCP_SERVER, NO_TELEMETRY, ClaudeMemWorker, mcp_server_params
from tests.servers.conftest import MEMSYNC, ROOT, mcp_over_http, server_env

T = TypeVar("T")
PROFILE_TOOLS = ("search", "timeline", "get_observations")
INDEX_HEADER = "| ID | Time | T | Title | Read |"
ROW = re.compile(r"^\| (#[SP]?\d+) \| [^|]+ \| [^|]+ \| .* \| (~\d+|-) \|$", re.M)


# -- values as claude-mem takes them (no server) -------------------------------------------------
def test_dates_as_claude_mem_takes_them() -> None:
    day = datetime(2026, 11, 18, tzinfo=UTC)
    assert date_value("2026-11-18", "dateStart") == day
    assert date_value("2026-11-18", "dateEnd", end=True) == datetime(2026, 11, 18, 23, 59, 59, 999000, tzinfo=UTC)
    assert date_value(1_795_000_000_000, "dateStart") == datetime.fromtimestamp(1_795_000_000, UTC)
    assert date_value("1795000000000", "dateStart") == datetime.fromtimestamp(1_795_000_000, UTC)
    assert date_value("2026-11-18T10:00:00Z", "dateEnd", end=True) == datetime(2026, 11, 18, 10, tzinfo=UTC)
    assert date_value(None, "dateStart") is None and date_value("", "dateEnd") is None
    for bad in ("yesterday", "18/11/2026", "9" * 30):
        with pytest.raises(BadRequest, match="date"):
            date_value(bad, "dateStart")


def test_numbers_and_lists_as_claude_mem_takes_them() -> None:
    assert whole(None, "limit", 20, 1, 100) == 20
    assert whole(7.0, "limit", 20, 1, 100) == 7 and whole("7", "limit", 20, 1, 100) == 7
    for bad in (0, 101, 2.5, "ten", True):
        with pytest.raises(BadRequest, match="limit"):
            whole(bad, "limit", 20, 1, 100)
    assert comma_list("bugfix, feature,,", None, ["decision,change"]) == ["bugfix", "feature", "decision", "change"]


# -- the real servers ----------------------------------------------------------------------------
def run_client(params: StdioServerParameters, body: Callable[[Client], Awaitable[T]]) -> T:
    async def run() -> T:
        async with Client(params, read_timeout_seconds=120) as client:
            return await body(client)

    return asyncio.run(run())


def profile_params(settings: Settings) -> StdioServerParameters:
    return StdioServerParameters(command=MEMSYNC, args=["mcp", "--profile", "claude-mem"],
                                 env=server_env(settings), cwd=ROOT)


def text_of(result: CallToolResult) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def shape(schema: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """What must agree between two tool schemas: property names and types (integer counted as
    number), and the required list."""
    def kind(p: dict[str, Any]) -> str:
        t = p.get("type")
        if t == "array":
            return f"array of {kind(p.get('items', {}))}"
        return "number" if t == "integer" else str(t)
    return {k: kind(v) for k, v in schema.get("properties", {}).items()}, sorted(schema.get("required", []))


@pytest.mark.slow
def test_the_tool_list_matches_the_real_claude_mem(tmp_path: Path, served: Settings) -> None:
    async def tools(client: Client) -> list[Tool]:
        return list((await client.list_tools()).tools)

    mine = run_client(profile_params(served), tools)
    home = tmp_path / "home"
    home.mkdir()
    theirs = run_client(StdioServerParameters(command=str(BUN), args=[str(MCP_SERVER)], cwd=home,
                                              env={"HOME": str(home), "PATH": "/usr/bin:/bin", **NO_TELEMETRY}), tools)
    assert [t.name for t in mine] == list(PROFILE_TOOLS)
    real = {t.name: t for t in theirs}
    assert len(real) == 15, sorted(real)  # 13.25.3 has 15 tools; the profile serves three
    for t in mine:
        assert shape(t.input_schema) == shape(real[t.name].input_schema), t.name
        assert t.input_schema == SCHEMAS[t.name]
        assert t.annotations is not None and t.annotations.read_only_hint
        assert t.description and t.description.startswith(real[t.name].description.split(":")[0])  # "Step 1"


def skill_calls(project: str, anchor: int, ids: list[int]) -> list[tuple[str, dict[str, Any]]]:
    """The calls of the mem-search skill's own examples (13.25.3's SKILL.md), on this data."""
    return [
        ("search", {"query": "authentication", "limit": 20, "project": project}),
        ("search", {"query": "bug", "type": "observations", "obs_type": "bugfix", "limit": 20, "project": project}),
        ("search", {"type": "observations", "dateStart": "2020-01-01", "limit": 20, "project": project}),
        ("timeline", {"anchor": anchor, "depth_before": 3, "depth_after": 3, "project": project}),
        ("timeline", {"query": "authentication", "depth_before": 3, "depth_after": 3, "project": project}),
        ("get_observations", {"ids": ids, "orderBy": "date_desc"}),
    ]


def answer_shape(tool: str, text: str) -> str:
    """The shape of an answer, as the skill reads it."""
    if tool == "get_observations":
        rows = json.loads(text.split("\n\nNot found:")[0])
        keys = {k for r in rows for k in ("id", "title", "narrative", "facts") if k in r}
        return "records: " + ",".join(sorted(keys))
    if tool == "timeline":
        head = text.splitlines()[0]
        return "timeline" if head.startswith("# Timeline") and "**Window:**" in text else f"? {head}"
    if text.startswith("No results found"):
        return "none"
    if not text.startswith("Found ") or INDEX_HEADER not in text or not ROW.search(text):
        return f"? {text[:80]}"
    return "index"


def skill_answers(params: StdioServerParameters, calls: list[tuple[str, dict[str, Any]]]) -> list[tuple[bool, str]]:
    async def body(client: Client) -> list[tuple[bool, str]]:
        out = []
        for tool, args in calls:
            result = await client.call_tool(tool, args)
            out.append((bool(result.is_error), text_of(result)))
        return out

    return run_client(params, body)


@pytest.mark.slow
def test_the_skills_examples_answer_in_the_same_shape_as_claude_mem(claude_mem: ClaudeMemWorker,
                                                                     tmp_path: Path) -> None:
    from tests.system.test_real_claude_mem import ROWS

    rows = {k: [dict(r) for r in v] for k, v in ROWS.items()}
    rows["observations"][0].update(title="Authentication tokens expired early", type="bugfix",
                                   narrative="The authentication bug: tokens expired an hour early.")
    assert claude_mem.import_rows(**rows)["observationsImported"] == 4
    settings = Settings(db=claude_mem.db, data_dir=tmp_path / "data", chroma_mode="embedded")
    resync(settings)
    calls = skill_calls("alpha", 2, [1, 3])
    theirs = skill_answers(mcp_server_params(claude_mem), calls)
    mine = skill_answers(profile_params(settings), calls)
    for (tool, args), (their_error, their_text), (my_error, my_text) in zip(calls, theirs, mine, strict=True):
        assert not their_error and not my_error, (tool, args, their_text, my_text)
        assert answer_shape(tool, my_text) == answer_shape(tool, their_text), (tool, args, my_text, their_text)
    # The ids the two list for the first search are claude-mem's own row ids.
    assert ROW.findall(mine[0][1])[0][0] == "#1", mine[0][1]


@pytest.mark.slow
def test_no_call_returns_a_record_of_another_kind_than_the_id_shown(served: Settings) -> None:
    async def body(client: Client) -> dict[str, Any]:
        listed = text_of(await client.call_tool("search", {"query": "uploads retry dashboard", "limit": 20,
                                                           "dateStart": "2000-01-01"}))
        refs = [r for r, _ in ROW.findall(listed)]
        opened = {}
        for ref in refs:
            number = ref.lstrip("#")
            value: int | str = int(number) if number.isdigit() else ref
            opened[ref] = json.loads(text_of(await client.call_tool("get_observations", {"ids": [value]})))
        numbers = json.loads(text_of(await client.call_tool("get_observations", {"ids": [1, 2]})))
        return {"refs": refs, "opened": opened, "numbers": numbers}

    got = run_client(profile_params(served), body)
    kinds = {"#S": "summary", "#P": "prompt"}
    assert {r[:2] for r in got["refs"]} >= {"#S", "#P"}, got["refs"]  # every kind listed
    for ref, records in got["opened"].items():
        want = kinds.get(ref[:2], "observation")
        assert [(r["kind"], f"#{r['id']}") for r in records] == [(want, "#" + ref.lstrip("#SP"))], (ref, records)
    assert [r["kind"] for r in got["numbers"]] == ["observation", "observation"]


@pytest.mark.slow
def test_claude_mem_values_and_memsync_meanings(served: Settings) -> None:
    async def body(client: Client) -> dict[str, tuple[bool, str]]:
        calls: dict[str, tuple[str, dict[str, Any]]] = {
            "newest": ("search", {"limit": 3}),
            "relevance": ("search", {"query": "upload retries", "limit": 5}),
            "by_date": ("search", {"query": "upload retries", "limit": 5, "orderBy": "date_asc"}),
            "epoch": ("search", {"query": "billing exports", "dateStart": 0}),
            "windowed": ("search", {"query": "billing exports"}),
            "prompts": ("search", {"query": "uploads fail", "type": "prompts"}),
            "alias": ("search", {"query": "retry", "type": "bugfix"}),
            "unknown_type": ("search", {"query": "retry", "obs_type": "nonsense"}),
            "bad_order": ("search", {"query": "x", "orderBy": "sideways"}),
            "bad_date": ("search", {"query": "x", "dateStart": "last week"}),
            "bad_limit": ("search", {"query": "x", "limit": 0}),
            "missing": ("get_observations", {"ids": [1, 999999]}),
        }
        out = {}
        for key, (tool, args) in calls.items():
            result = await client.call_tool(tool, args)
            out[key] = (bool(result.is_error), text_of(result))
        return out

    got = run_client(profile_params(served), body)
    ids = {k: [r for r, _ in ROW.findall(text)] for k, (_, text) in got.items()}
    # Without a query: the newest first; with one: the best match first, unless orderBy asks for dates.
    assert ids["newest"][0] in ("#P2", "#S2", "#2"), got["newest"][1]
    assert ids["relevance"][0] in ("#P1", "#4", "#1"), got["relevance"][1]  # about upload retries
    assert ids["by_date"].index("#4") < ids["by_date"].index("#1"), got["by_date"][1]  # 2.5 days ago, then 2
    # The window is memsync's (90 days): an explicit date replaces it, epoch ms 0 included.
    assert "#5" in ids["epoch"] and "#5" not in ids["windowed"], (got["epoch"][1], got["windowed"][1])
    assert ids["prompts"] and all(r.startswith("#P") for r in ids["prompts"])
    assert ids["alias"] and all(r[1].isdigit() for r in ids["alias"])  # type=bugfix: observations of that type
    assert not got["unknown_type"][0] and got["unknown_type"][1].startswith("No results found")
    assert "this database has" in got["unknown_type"][1]
    for bad, word in (("bad_order", "orderBy"), ("bad_date", "dateStart"), ("bad_limit", "limit")):
        error, text = got[bad]
        assert error and word in text and "Traceback" not in text, (bad, text)
    assert got["missing"][1].endswith("Not found: #999999"), got["missing"][1]


@pytest.mark.slow
def test_the_profile_ranks_as_memsyncs_own_search(served: Settings) -> None:
    """The profile changes parameters and the answer's shape, never the ranking: its ids, in order,
    are the library's hybrid search's (the dev-set figure of the same check: docs/benchmarks.md)."""
    from memsync.config.records import format_ref
    from memsync.search import Searcher

    queries = ["upload retries", "dark dashboard header", "postgres connection pooling", "why uploads fail"]

    async def body(client: Client) -> tuple[list[list[str]], list[str]]:
        out, texts = [], []
        for q in queries:
            text = text_of(await client.call_tool("search", {"query": q, "limit": 10}))
            out.append([r for r, _ in ROW.findall(text)])
            texts.append(text)
        return out, texts

    served_ids, texts = run_client(profile_params(served), body)
    searcher = Searcher(served)
    try:
        library = [[format_ref(r.kind, r.id) for r in searcher.search(SearchRequest(
            query=q, limit=10)).results] for q in queries]
    finally:
        searcher.close()
    assert served_ids == library
    assert all(served_ids)
    # Relevance order jumps between days: one table, each row's Time with its date (or ditto).
    dated = re.compile(r"^\| #[SP]?\d+ \| (?:[A-Z][a-z]{2} \d{1,2}, \d{4} \d{1,2}:\d{2} [AP]M|″) \|", re.M)
    for text in texts:
        assert text.count(INDEX_HEADER) == 1 and "\n### Best match first\n" in text, text
        assert len(dated.findall(text)) == len(ROW.findall(text)), text


@pytest.mark.slow
def test_the_profile_over_streamable_http(served: Settings) -> None:
    import httpx

    with mcp_over_http(served, "--profile", "claude-mem") as port:
        async def run() -> tuple[list[str], str]:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                tools = await client.list_tools()
                found = await client.call_tool("search", {"query": "uploads fail", "type": "prompts"})
                return [t.name for t in tools.tools], text_of(found)

        names, text = asyncio.run(run())
        assert names == list(PROFILE_TOOLS)
        assert text.startswith("Found ") and ROW.findall(text)[0][0] == "#P1", text
        listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        refused = httpx.post(f"http://127.0.0.1:{port}/mcp", json=listing, timeout=30, headers={
            "Accept": "application/json, text/event-stream", "Host": "attacker.example"})
        assert refused.status_code == 421  # the same Host rule as memsync's own tools
