"""The servers' published schemas, compared exactly with the snapshots in ``tests/servers/data/``:
every MCP tool (name, description, input and output schema) of each profile the code builds, and
the HTTP API's OpenAPI document. A refactor of the servers keeps them byte for byte; a change an
agent or API client would see shows here as a diff to review.

After an intended change, write the snapshots again and commit them with it::

    MEMSYNC_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/servers/test_schemas.py
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp.server.mcpserver import MCPServer

from memsync.config.settings import Settings
from memsync.servers.claude_mem_tools import build_profile_server
from memsync.servers.http_api import create_app
from memsync.servers.mcp_tools import build_server

DATA = Path(__file__).parent / "data"
UPDATE = os.environ.get("MEMSYNC_UPDATE_SNAPSHOTS") == "1"


def tool_schemas(server: MCPServer) -> list[dict[str, Any]]:
    """What a client's tools/list shows of each tool that an agent reads, in the server's order."""
    return [{"name": t.name, "description": t.description, "inputSchema": t.input_schema,
             "outputSchema": t.output_schema} for t in asyncio.run(server.list_tools())]


def matches_snapshot(name: str, value: object) -> None:
    """``value`` as JSON equals the file ``name`` under data/ (written instead with MEMSYNC_UPDATE_SNAPSHOTS=1)."""
    path = DATA / name
    text = json.dumps(value, indent=2, sort_keys=False, ensure_ascii=False) + "\n"
    if UPDATE:
        DATA.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no snapshot {path.name}: run with MEMSYNC_UPDATE_SNAPSHOTS=1 to write it"
    assert json.loads(path.read_text(encoding="utf-8")) == json.loads(text), (
        f"{path.name} differs from what the servers publish; if intended, rerun with MEMSYNC_UPDATE_SNAPSHOTS=1")
    assert path.read_text(encoding="utf-8") == text  # the same order of tools, properties and keys too


@pytest.fixture
def plain(tmp_path: Path) -> Settings:
    """Settings with every default (no database needed: building a server opens nothing)."""
    return Settings(db=tmp_path / "absent.db", data_dir=tmp_path / "data")


PROFILES: dict[str, tuple[Callable[[Settings], MCPServer], dict[str, Any]]] = {
    "mcp-memsync.json": (build_server, {"mcp_structured": False}),  # the default: markdown only
    "mcp-memsync-structured.json": (build_server, {"mcp_structured": True}),  # with output schemas
    "mcp-claude-mem.json": (build_profile_server, {}),
}


@pytest.mark.parametrize("name", PROFILES)
def test_mcp_tool_schemas_are_unchanged(plain: Settings, name: str) -> None:
    build, update = PROFILES[name]
    matches_snapshot(name, tool_schemas(build(plain.model_copy(update=update))))


def test_openapi_document_is_unchanged(plain: Settings) -> None:
    matches_snapshot("openapi.json", create_app(plain).openapi())
