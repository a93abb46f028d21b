"""claude-mem's own Chroma client searches the upstream-readable store that memsync keeps.

claude-mem's worker reaches Chroma only through chroma-mcp 0.2.6 (MCP over stdio, spawned with
uvx; in remote mode ``--client-type http --host --port --ssl``). ``make test`` installs that
client into ``.venv-chroma-mcp``; this test spawns it as claude-mem does, against a real ``chroma
run`` that memsync synced with ``upstream_store`` on, and makes claude-mem's calls: the collection
creation it always tries first, a count, and a search by ``query_texts`` with its ``doc_type`` and
project-or-merged-project filter. chroma-mcp embeds the query with Chroma's default embedding
function, which downloads its model on first use; the test gives it memsync's bundled model files
instead (the same all-MiniLM-L6-v2, int8 weights), so it runs offline.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult

from memsync.config.settings import Settings
from memsync.worker.pipeline.resync import resync
from scripts.real_claude_mem import CHROMA_MCP, seed_default_model
from tests.conftest import free_port, held_server
from tests.upstream.written import written_db
from tests.worker.upstream_reference import reference_documents
from tests.worker.upstream_shapes import shapes_db

pytestmark = pytest.mark.slow
WHERE_ALPHA = {"$and": [{"doc_type": "observation"}, {"$or": [{"project": "alpha"}, {"merged_into_project": "alpha"}]}]}


def text_of(result: CallToolResult) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def claude_mem_calls(port: int, home: Path) -> dict[str, CallToolResult]:
    """The calls claude-mem's ChromaSync makes, through chroma-mcp as its ChromaMcpManager spawns it."""
    params = StdioServerParameters(
        command=str(CHROMA_MCP), args=["--client-type", "http", "--host", "127.0.0.1", "--port", str(port),
                                       "--ssl", "false"],
        env={"HOME": str(home), "PATH": "/usr/bin:/bin"}, cwd=home)
    calls: dict[str, tuple[str, dict[str, Any]]] = {
        "create": ("chroma_create_collection", {"collection_name": "cm__claude-mem"}),
        "count": ("chroma_get_collection_count", {"collection_name": "cm__claude-mem"}),
        "query": ("chroma_query_documents", {"collection_name": "cm__claude-mem", "n_results": 5,
                                             "query_texts": ["which files had stale rows in the cache?"],
                                             "where": WHERE_ALPHA,
                                             "include": ["documents", "metadatas", "distances"]}),
    }

    async def run() -> dict[str, CallToolResult]:
        async with Client(params, read_timeout_seconds=120) as client:
            return {key: await client.call_tool(tool, args) for key, (tool, args) in calls.items()}

    return asyncio.run(run())


def test_claude_mems_chroma_mcp_searches_the_store(tmp_path: Path) -> None:
    assert CHROMA_MCP.exists(), f"{CHROMA_MCP} is missing: `make test` installs claude-mem's Chroma client there"
    # claude-mem's worker makes the file; the shapes go in by hand (explicit ids, merged projects).
    settings = Settings(db=shapes_db(tmp_path / "claude-mem.db", written_db), data_dir=tmp_path / "data",
                        chroma_mode="managed", chroma_port=free_port(), upstream_store=True)
    home = tmp_path / "claude-mem-home"
    seed_default_model(home)
    with held_server(settings):
        resync(settings)
        got = claude_mem_calls(settings.chroma_port, home)
    # claude-mem creates the collection every time and takes "already exists" as success.
    assert got["create"].is_error and "already exists" in text_of(got["create"])
    assert not got["count"].is_error and int(text_of(got["count"])) == len(reference_documents(settings.db))
    assert not got["query"].is_error, text_of(got["query"])
    found = json.loads(text_of(got["query"]))
    ids, metas, texts = found["ids"][0], found["metadatas"][0], found["documents"][0]
    assert ids[0] == "obs_1_narrative" and texts[0] == "The cache kept stale rows."
    assert all(m["doc_type"] == "observation" and "alpha" in (m["project"], m.get("merged_into_project"))
               for m in metas)
    assert {m["title"] for m in metas} >= {"Fix the cache"}
