"""config.filters: each search filter declared once (a Filters field and its parameter), and from
there a parameter of every front end, a clause of the SQL every side checks rows with, and a reason
for the text index and the vector copy to step aside when they cannot apply it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.filters import FILTER_PARAMS, FilterParam, Filters
from memsync.config.settings import Settings
from memsync.main import main
from memsync.search.models import make_window
from memsync.search.textindex import INDEXED_FILTERS
from memsync.search.vectorcopy import COPY_FILTERS
from memsync.servers.http_api import create_app
from memsync.servers.mcp_tools import build_server
from memsync.servers.params import offering_filters
from tests.search.test_sql import open_rows

# The MCP search tools and the kinds each searches.
TOOL_KINDS = {"search": KINDS, "search_observations": (Kind.OBSERVATION,), "search_sessions": (Kind.SUMMARY,),
              "search_user_prompts": (Kind.PROMPT,)}


def sample(param: FilterParam) -> object:
    """A value of the filter's shape that no row of the test database matches by accident."""
    if param.shape == "date":  # after every row, or (the end of a range) before every row
        return datetime(2100 if param.field == "date_from" else 2001, 1, 1, tzinfo=UTC)
    return ("zz-none",) if param.shape == "list" else "zz-none"


def test_each_filter_is_declared_once_with_its_own_names() -> None:
    assert [p.field for p in FILTER_PARAMS] == [f for f in Filters.__dataclass_fields__]
    for attr in ("field", "param", "flag"):
        names = [getattr(p, attr) for p in FILTER_PARAMS]
        assert len(set(names)) == len(names), attr
    assert all(p.flag.startswith("--") and p.help for p in FILTER_PARAMS)


def test_every_filter_is_a_parameter_of_every_front_end(tmp_path: Path) -> None:
    settings = Settings(db=tmp_path / "absent.db", data_dir=tmp_path / "data")
    tools = {t.name: t for t in asyncio.run(build_server(settings).list_tools())}
    for name, kinds in TOOL_KINDS.items():
        offered = {p.param for p in FILTER_PARAMS if p.kinds & set(kinds)}
        props = set(tools[name].input_schema["properties"])
        assert offered <= props, name
        assert not ({p.param for p in FILTER_PARAMS} - offered) & props, name  # none it cannot apply
    types = tools["search"].input_schema["properties"]["type"]
    assert {"type": "array", "items": {"type": "string"}} in types["anyOf"]  # one value or several

    query = {p["name"] for p in create_app(settings).openapi()["paths"]["/api/search"]["get"]["parameters"]}
    assert {p.param for p in FILTER_PARAMS} <= query

    help_text = CliRunner().invoke(main, ["search", "--help"]).output
    assert all(p.flag in help_text for p in FILTER_PARAMS)


@pytest.mark.parametrize("param", FILTER_PARAMS, ids=lambda p: p.field)
def test_every_filter_restricts_the_rows_every_side_checks(tmp_path: Path, param: FilterParam) -> None:
    rows = open_rows(tmp_path)
    try:
        restricted = Filters(**{param.field: sample(param)})  # type: ignore[arg-type]
        window = make_window(0, 0, restricted.date_from, restricted.date_to)  # a date range is the window
        for kind in param.kinds:
            assert rows.count(kind, Filters(), None) > 0
            assert rows.count(kind, restricted, window) == 0, kind
    finally:
        rows.close()


def test_the_text_index_and_the_copy_step_aside_for_a_filter_they_do_not_know() -> None:
    assert Filters(project="a", types=("bugfix",)).supported(INDEXED_FILTERS)
    assert Filters(project="a", types=("bugfix",)).supported(COPY_FILTERS)
    for field in ("platform", "concepts", "files"):
        value = ("x",) if field != "platform" else "codex"
        assert not Filters(**{field: value}).supported(INDEXED_FILTERS)  # type: ignore[arg-type]
        assert not Filters(**{field: value}).supported(COPY_FILTERS)  # type: ignore[arg-type]


def test_evidence_rows_keep_only_the_filters_of_every_kind() -> None:
    f = Filters(project="a", platform="codex", types=("bugfix",), concepts=("c",), files=("x.py",),
                date_from=datetime(2026, 1, 1, tzinfo=UTC))
    assert f.common() == Filters(project="a", platform="codex", date_from=datetime(2026, 1, 1, tzinfo=UTC))


def test_a_tool_that_cannot_receive_its_filters_is_refused_when_declared() -> None:
    def no_filters(query: str = "") -> None: ...

    with pytest.raises(TypeError, match=r"\*\*filters"):
        offering_filters(lambda p: str | None, KINDS)(no_filters)


def test_rows_of_a_kind_a_filter_does_not_apply_to_never_pass_it() -> None:
    assert Filters(files=("x.py",)).admits(Kind.SUMMARY) and not Filters(files=("x.py",)).admits(Kind.PROMPT)
    assert not Filters(types=("bugfix",)).admits(Kind.SUMMARY)
    assert all(Filters(project="a", platform="codex").admits(k) for k in KINDS)
