"""The same kind words in every front end: the CLI, the HTTP API, the MCP tools and the
page offer the same kind choices, one search for summaries answers with the same records and kind
value in all of them, and every accepted kind name (the renamed ``sessions`` among them) is taken."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any, cast

import click
import pytest
from click.testing import CliRunner
from mcp import Client

from memsync.config.claude_mem.schema import Kind
from memsync.config.kinds import KIND_BY_NAME, KIND_CHOICES, choice_for
from memsync.config.settings import Settings
from memsync.main import main
from memsync.search import Searcher
from memsync.servers.http_api import create_app
from memsync.servers.mcp_tools import build_server
from tests.conftest import make_db, mixed_records
from tests.servers.conftest import ask

Hits = list[tuple[str, int]]  # (kind, id) of each result, in order


@pytest.fixture
def db(settings: Settings) -> Iterator[Settings]:
    make_db(settings.db, mixed_records(4))
    yield settings.model_copy(update={"mcp_structured": True, "window_days": 0})


def hits(results: list[dict[str, Any]]) -> Hits:
    return [(r["kind"], int(r["id"] if "id" in r else r["ref"].lstrip("#SP"))) for r in results]


def cli(settings: Settings, *args: str) -> Any:
    env = {"MEMSYNC_DB": str(settings.db), "MEMSYNC_DATA_DIR": str(settings.data_dir),
           "MEMSYNC_CHROMA_MODE": "embedded", "MEMSYNC_WINDOW_DAYS": "0"}
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def mcp(settings: Settings, calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[Any], list[Any]]:
    """The listed tools, then each call's result, from the MCP server in process."""
    searcher = Searcher(settings)

    async def run() -> tuple[list[Any], list[Any]]:
        async with Client(build_server(settings, searcher)) as client:
            tools = (await client.list_tools()).tools
            return tools, [await client.call_tool(tool, args) for tool, args in calls]

    try:
        return asyncio.run(run())
    finally:
        searcher.close()


def page_choices(page: str) -> tuple[list[str], dict[str, str]]:
    """The kind select's option values, and the page's map of accepted names to choices."""
    select = re.search(r'<select id="kind".*?</select>', page, re.S)
    assert select is not None
    aliases = re.search(r"const KIND_CHOICE = (\{.*?\});", page)
    assert aliases is not None and "{kind_" not in page
    return re.findall(r'<option value="([^"]*)"', select.group(0)), json.loads(aliases.group(1))


def test_every_front_end_offers_the_same_kind_choices(db: Settings) -> None:
    kind_option = next(p for p in cast(click.Group, main).commands["search"].params if p.name == "kind")
    cli_choices = list(cast(click.Choice[str], kind_option.type).choices)
    searcher = Searcher(db)
    try:
        schema = create_app(db, searcher).openapi()
    finally:
        searcher.close()
    param = next(p for p in schema["paths"]["/api/search"]["get"]["parameters"] if p["name"] == "kind")
    tools, _ = mcp(db, [])
    mcp_choices = next(t for t in tools if t.name == "search").input_schema["properties"]["kind"]["enum"]
    page, aliases = page_choices(ask(db, "/").text)
    assert cli_choices == param["schema"]["enum"] == mcp_choices == page == list(KIND_CHOICES)
    assert aliases == {name: choice_for(name) for name in KIND_BY_NAME} and aliases["sessions"] == "summaries"


def test_one_search_for_summaries_answers_the_same_everywhere(db: Settings) -> None:
    from_cli = hits(json.loads(cli(db, "search", "--json", "--kind", "summaries", "learned"))["results"])
    from_http = hits(ask(db, "/api/search", q="learned", kind="summaries").json()["results"])
    _, answers = mcp(db, [("search", {"query": "learned", "kind": "summaries"}),
                          ("search_sessions", {"query": "learned"})])
    from_mcp, from_tool = (hits(a.structured_content["results"]) for a in answers)
    assert from_cli and {k for k, _ in from_cli} == {Kind.SUMMARY.value}
    assert from_cli == from_http == from_mcp == from_tool
    # The words a person reads: the reference letter and the singular, the same in CLI and MCP text.
    first = f"#S{from_cli[0][1]}"
    assert re.search(rf"{first} .*\] summary: ", cli(db, "search", "--kind", "summaries", "learned"))
    assert f"| {first} | summary |" in answers[0].content[0].text


@pytest.mark.parametrize("name", sorted(KIND_BY_NAME))
def test_each_accepted_kind_name_is_taken_everywhere(db: Settings, name: str) -> None:
    """Every alias (``sessions``, ``session``, ``user_prompts``, ``obs``, the singulars, ...) is taken by
    the CLI, HTTP and MCP as the kind it names; the page maps it to that choice (test above)."""
    want = {KIND_BY_NAME[name].value}
    from_cli = hits(json.loads(cli(db, "search", "--json", "--kind", name))["results"])
    from_http = ask(db, "/api/search", kind=name)
    _, (answer,) = mcp(db, [("search", {"kind": name})])
    assert from_http.status_code == 200, from_http.text
    assert not answer.is_error, answer.content
    assert {k for k, _ in from_cli} == want
    assert from_cli == hits(from_http.json()["results"]) == hits(answer.structured_content["results"])
