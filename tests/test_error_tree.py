"""One error tree: every error memsync raises on purpose is a ``MemsyncError``, and each
boundary translates it with one table, the nearest branch winning: the CLI's exit code, the HTTP
API's status and detail, the MCP tools' error text."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest
from mcp.server.mcpserver.exceptions import ToolError

from memsync.commands.options import errors_as_exit
from memsync.config import errors
from memsync.config.claude_code.settings_file import ClaudeSettingsError
from memsync.config.claude_mem.schema import SchemaError
from memsync.config.docids import DocIdError
from memsync.config.errors import (
    BadData,
    ConfigError,
    InvalidRequest,
    MemsyncError,
    SourceUnavailable,
    StoreDamaged,
    StoreUnavailable,
    closest,
)
from memsync.config.records import InvalidRecordId, RecordRefError
from memsync.config.settings import Settings, SettingsError
from memsync.search import Searcher
from memsync.search.models import SearchError
from memsync.search.sql import QueryTimeout
from memsync.search.vectorstore import VectorUnavailable
from memsync.servers.http_api import create_app
from memsync.servers.mcp_boundary import answers
from memsync.servers.params import BadRequest
from memsync.worker.pipeline.sink import RejectedBatch
from memsync.worker.rows.documents import RowError
from memsync.worker.seed.importer import RecordError


def all_subclasses(cls: type) -> set[type]:
    """Every class below ``cls``."""
    out: set[type] = set()
    for sub in cls.__subclasses__():
        out |= {sub, *all_subclasses(sub)}
    return out


def name(value: object) -> str:
    """A case's id: the error's class."""
    return type(value).__name__ if isinstance(value, Exception) else ""


LONE_BEFORE = [SchemaError, SettingsError, QueryTimeout, VectorUnavailable, SearchError]  # the five outside it before


class TestTree:
    @pytest.mark.parametrize("cls", [*LONE_BEFORE, BadRequest, RecordRefError, InvalidRecordId, RecordError,
                                     ClaudeSettingsError])
    def test_every_error_raised_on_purpose_is_in_the_tree(self, cls: type[Exception]) -> None:
        assert issubclass(cls, MemsyncError)

    def test_no_exception_of_the_package_is_outside_the_tree(self) -> None:
        # Every module imported, then every exception class they define: a new one outside the
        # tree would be listed by each boundary apart again. Private ones are control flow.
        import importlib
        import pkgutil

        import memsync

        for info in pkgutil.walk_packages(memsync.__path__, "memsync."):
            importlib.import_module(info.name)
        lone = [f"{c.__module__}.{c.__name__}" for c in all_subclasses(Exception)
                if c.__module__.startswith("memsync.") and not c.__name__.startswith("_")
                and not issubclass(c, MemsyncError)]
        assert lone == []
        assert all(issubclass(c, BadData) and issubclass(c, ValueError) for c in (RowError, RejectedBatch, DocIdError))

    def test_the_errors_code_catches_as_builtins_stay_those(self) -> None:
        # lexical.py falls back on a RuntimeError of the text index (a QueryTimeout among them); the
        # parsers' callers catch ValueError.
        assert issubclass(QueryTimeout, RuntimeError) and issubclass(VectorUnavailable, RuntimeError)
        assert all(issubclass(c, ValueError) for c in (SearchError, BadRequest, RecordRefError, RecordError))

    def test_closest_takes_the_nearest_branch(self) -> None:
        table = {MemsyncError: "any", StoreUnavailable: "store", InvalidRequest: "request"}
        assert closest(StoreDamaged("gone", "c"), table) == "store"
        assert closest(BadRequest("x"), table) == "request"
        assert closest(QueryTimeout("x"), table) == "any"
        assert closest(QueryTimeout("x"), {**table, SourceUnavailable: "source"}) == "source"


def drawn_tree(doc: str) -> dict[str, tuple[str | None, str, bool]]:
    """The tree drawn in ``config.errors``' docstring: each class name -> (its parent's name, its
    text with continuation lines, whether it is drawn as the last of its siblings)."""
    entries: dict[str, tuple[str | None, str, bool]] = {}
    parents: list[str] = []  # the open branch, the root first
    last = ""
    for line in doc.splitlines():
        if line == "    MemsyncError":
            parents, last = ["MemsyncError"], "MemsyncError"
            entries[last] = (None, "", True)
        elif parents and (m := re.match(r"^    ((?:[│ ]   )*)([├└])── (\w+)\s*(.*)$", line)):
            depth = len(m.group(1)) // 4 + 1
            del parents[depth:]
            last = m.group(3)
            entries[last] = (parents[depth - 1], m.group(4), m.group(2) == "└")
            parents.append(last)
        elif parents and re.match(r"^    [│ ]", line) and line.strip(" │"):
            parent, text, is_last = entries[last]
            entries[last] = (parent, f"{text} {line.strip(' │')}", is_last)
        elif parents and not line.strip():
            break
    return entries


def the_classes() -> dict[str, tuple[str | None, type]]:
    """Every public error of the package -> (its parent in the tree, the class)."""
    import importlib
    import pkgutil

    import memsync

    for info in pkgutil.walk_packages(memsync.__path__, "memsync."):
        importlib.import_module(info.name)
    out: dict[str, tuple[str | None, type]] = {"MemsyncError": (None, MemsyncError)}
    for cls in all_subclasses(MemsyncError):
        if not cls.__name__.startswith("_"):
            parent = next(b for b in cls.__bases__ if issubclass(b, MemsyncError))
            assert cls.__name__ not in out, f"two errors named {cls.__name__}"
            out[cls.__name__] = (parent.__name__, cls)
    return out


class TestTheDrawing:
    """config.errors' docstring draws the tree: the drawing is the classes, so it cannot drift."""

    def test_every_class_is_drawn_under_its_parent(self) -> None:
        drawn = drawn_tree(errors.__doc__ or "")
        classes = the_classes()
        assert {n: p for n, (p, _, _) in drawn.items()} == {n: p for n, (p, _) in classes.items()}

    def test_each_drawn_error_names_the_module_that_defines_it(self) -> None:
        drawn = drawn_tree(errors.__doc__ or "")
        for name, (_, cls) in the_classes().items():
            module = cls.__module__.removeprefix("memsync.")
            text = drawn[name][1]
            if module == "config.errors":
                assert not re.search(r"\((?:config|worker|search|servers|cli)\.[\w.]+\)", text), (name, text)
            else:
                assert f"({module})" in text, (name, module, text)
            assert text or name == "MemsyncError", f"{name} is drawn without saying what the caller should do"

    def test_the_last_sibling_is_drawn_with_a_corner(self) -> None:
        drawn = drawn_tree(errors.__doc__ or "")
        children: dict[str | None, list[str]] = {}
        for name, (parent, _, _) in drawn.items():
            children.setdefault(parent, []).append(name)
        for names in children.values():
            assert [drawn[n][2] for n in names] == [False] * (len(names) - 1) + [True], names

    def test_the_parser_sees_a_drift(self) -> None:
        doc = errors.__doc__ or ""
        moved = doc.replace("    │       └── BadRequest", "    │   └── BadRequest ")
        assert drawn_tree(moved)["BadRequest"][0] == "InvalidRequest"
        assert "ChannelError" not in drawn_tree(doc.replace("ChannelError", "Channel Error"))
        assert len(drawn_tree(doc)) == len(the_classes())


CLI_CASES: list[tuple[MemsyncError, int]] = [
    (ConfigError("bad setup"), 2), (SchemaError("not a claude-mem database"), 2),
    (SettingsError("invalid setting x"), 2), (ClaudeSettingsError("not JSON"), 2),
    (SearchError("no observation with id 9"), 2), (RecordError("line 3: no kind"), 2),
    (StoreUnavailable("Chroma down"), 1), (QueryTimeout("query exceeded 10 ms"), 1),
    (VectorUnavailable("no vectors"), 1), (SourceUnavailable("locked"), 1),
]


@pytest.mark.parametrize(("error", "code"), CLI_CASES, ids=name)
def test_the_cli_exits_with_one_line_and_the_branchs_code(error: MemsyncError, code: int,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited, errors_as_exit():
        raise error
    assert exited.value.code == code
    assert capsys.readouterr().err == f"memsync: {error}\n"


HTTP_CASES: list[tuple[MemsyncError, int, str]] = [
    (BadRequest("limit must be an integer from 1 to 100, got 0"), 400, "limit must be an integer from 1 to 100, got 0"),
    (SearchError("no summary with id 4"), 400, "no summary with id 4"),
    (QueryTimeout("query exceeded 250 ms"), 503, "the database did not answer in time (query exceeded 250 ms)"),
    (SchemaError("not a claude-mem database: missing table(s) sdk_sessions"), 503,
     "not a claude-mem database: missing table(s) sdk_sessions"),
    (StoreUnavailable("Chroma down at /home/me/.memsync/chroma"), 503, "Chroma down at <path>"),
    (DocIdError("not a document id: 'x'"), 500, "not a document id: 'x'"),
]


@pytest.mark.parametrize(("error", "status", "detail"), HTTP_CASES,
                         ids=name)
def test_the_http_api_answers_the_branchs_status_and_detail(settings: Settings, error: MemsyncError, status: int,
                                                            detail: str) -> None:
    searcher = Searcher(settings)
    app = create_app(settings, searcher)

    @app.get("/raise")
    def raises() -> None:
        raise error

    async def run() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8787") as c:
            return await c.get("/raise")

    try:
        response = asyncio.run(run())
    finally:
        searcher.close()
    assert (response.status_code, response.json()) == (status, {"detail": detail})


MCP_CASES: list[tuple[MemsyncError, str]] = [
    (BadRequest("file /etc/x is refused"), "file /etc/x is refused"),  # the agent's own value, as given
    (QueryTimeout("query exceeded 250 ms"), "the database did not answer in time (query exceeded 250 ms); "
                                           "try a narrower query"),
    (SchemaError("not a claude-mem database"), "not a claude-mem database"),
    (StoreUnavailable("Chroma down at /home/me/store"), "Chroma down at <path>"),
    (StoreUnavailable(""), "StoreUnavailable"),
]


@pytest.mark.parametrize(("error", "text"), MCP_CASES, ids=name)
def test_the_mcp_tools_answer_the_branchs_text(tmp_path: Path, error: MemsyncError, text: str) -> None:
    settings = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="embedded")
    with pytest.raises(ToolError) as refused, answers(settings):
        raise error
    assert str(refused.value) == text


def test_an_error_outside_the_tree_stays_on_the_server() -> None:
    with pytest.raises(ToolError, match=r"^internal error \(details are in the server's log\)$"), answers():
        raise OverflowError("int too large")
