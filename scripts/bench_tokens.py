"""What MCP answers cost an agent: the size of each tool's output, through a real MCP client.

    .venv/bin/python -m scripts.bench_tokens [--sessions 200] [--out .bench/bench_tokens.json]

Builds the demo database (``--sessions`` sessions of claude-mem-like records), syncs it into an
embedded Chroma with the shipped model, connects the MCP SDK's client to memsync's MCP server
in-process and calls the tools with typical arguments. For each call it reports characters and
tokens of the returned text, and for searches the cost per result row (total minus a zero-result
answer's header, divided by the rows). Tokens are counted two ways, since no model-vendor
tokenizer can be loaded offline: the shipped MiniLM WordPiece tokenizer (close to the BPE
tokenizers of chat models on English text; ``memsync.config.tokens``, the one counter, which the
injection budget uses too) and characters / 4 (the usual rule of thumb).
Baseline in the same run: the JSON contract of the same search (``memsync search --json``).
The claude-mem profile (``memsync mcp --profile claude-mem``) is measured beside memsync's own
tools with the calls of claude-mem's ``mem-search`` skill (rows named ``claude-mem: TOOL``).

Each answer also carries its structured content (``servers.structured``); its size is reported
as ``sc_chars`` / ``sc_wordpiece``, serialized compactly as a JavaScript client's
``JSON.stringify`` would: what a model reads from clients that show it ``structuredContent``
instead of the text when both are present (Claude Code, opencode, Codex).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from memsync.commands.db import make_demo_db
from memsync.config.settings import Settings
from memsync.config.tokens import count_tokens
from memsync.search import Searcher, SearchRequest
from memsync.servers.claude_mem_tools import build_profile_server
from memsync.servers.mcp_tools import build_server
from memsync.worker.pipeline.resync import resync
from scripts.benchlib import print_table, write_json

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("search", {"query": "connection pool timeout", "limit": 5}),
    ("search", {"query": "connection pool timeout", "limit": 10}),
    ("search", {"query": "connection pool timeout", "limit": 20}),
    ("search", {"query": "dark mode toggle", "limit": 10, "window_days": 0}),
    ("search_observations", {"query": "refund endpoint duplicate events", "limit": 10}),
    ("search_sessions", {"query": "JWT validation", "limit": 5}),
    ("search_user_prompts", {"query": "fix the date range picker", "limit": 5}),
    ("find_by_type", {"type": "bugfix", "limit": 10}),
    ("timeline", {"anchor": "40", "depth_before": 5, "depth_after": 5}),
    ("recent_context", {"limit": 10}),
    ("find_similar", {"observation_id": 40, "limit": 5}),
    ("get_observations", {"ids": ["40"]}),
    ("get_observations", {"ids": ["40", "41", "42"]}),
    ("search", {"query": "connection pool timeout", "limit": 5, "format": "full"}),
]

# The claude-mem profile, with the calls its mem-search skill teaches (limit 20 is its default).
PROFILE_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("search", {"query": "connection pool timeout", "limit": 10}),
    ("search", {"query": "connection pool timeout"}),
    ("search", {"query": "bug", "type": "observations", "obs_type": "bugfix", "limit": 20}),
    ("timeline", {"anchor": 40, "depth_before": 3, "depth_after": 3}),
    ("get_observations", {"ids": [40]}),
    ("get_observations", {"ids": [40, 41, 42]}),
]


def main(argv: list[str] | None = None) -> int:
    """Run the measurement; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, default=200, help="demo sessions in the database")
    p.add_argument("--out", type=Path, default=Path(".bench/bench_tokens.json"))
    args = p.parse_args(argv)

    tokens = count_tokens  # the one counter (config.tokens), also the injection budget's

    with tempfile.TemporaryDirectory(prefix="memsync-tokens-") as tmp:
        # Structured content on, to measure it too (off by default: the text is the same either way).
        settings = Settings(db=Path(tmp) / "claude-mem.db", data_dir=Path(tmp) / "data", chroma_mode="embedded",
                            mcp_structured=True)
        make_demo_db(settings.db, args.sessions)
        t = time.perf_counter()
        resync(settings)
        print(f"demo database: {args.sessions} sessions, synced in {time.perf_counter() - t:.0f} s")
        searcher = Searcher(settings)
        try:
            rows, empty_header = asyncio.run(_measure(settings, searcher, tokens))
            baseline = searcher.search(SearchRequest(query="connection pool timeout", limit=10)).to_json()
        finally:
            searcher.close()
    base_text = json.dumps(baseline)
    rows.append({"tool": "(baseline) search --json", "args": "limit=10", "results": len(baseline["results"]),
                 "chars": len(base_text), "wordpiece": tokens(base_text), "chars/4": len(base_text) // 4,
                 "per_result_wp": round((tokens(base_text) - empty_header) / max(1, len(baseline["results"])), 1)})
    print_table(rows)
    write_json({"sessions": args.sessions, "rows": rows}, args.out)
    return 0


async def _measure(settings: Settings, searcher: Searcher, tokens: Any) -> tuple[list[dict[str, Any]], int]:
    from mcp import Client

    out: list[dict[str, Any]] = []
    async with Client(build_server(settings, searcher)) as client:
        empty = await client.call_tool("search", {"query": "zzzqqq xxyyzz", "limit": 10})
        empty_text = "\n".join(getattr(c, "text", "") for c in empty.content)
        header = tokens(empty_text.splitlines()[0])
        out += await _calls(client, CALLS, header, tokens, "")
    async with Client(build_profile_server(settings, searcher)) as client:
        empty = await client.call_tool("search", {"query": "zzzqqq xxyyzz", "limit": 10})
        empty_text = "\n".join(getattr(c, "text", "") for c in empty.content)
        out += await _calls(client, PROFILE_CALLS, tokens("\n".join(empty_text.splitlines()[:2])), tokens,
                            "claude-mem: ")
    return out, header


async def _calls(client: Any, calls: list[tuple[str, dict[str, Any]]], header: int, tokens: Any,
                 label: str) -> list[dict[str, Any]]:
    """One row per call: the answer's size, and per result row beyond ``header`` tokens."""
    out: list[dict[str, Any]] = []
    for tool, arguments in calls:
        result = await client.call_tool(tool, arguments)
        text = "\n".join(getattr(c, "text", "") for c in result.content)
        n = sum(1 for line in text.splitlines() if line.startswith("| #"))
        n = n or text.count("\n## ") + text.startswith("## ")
        if not n and text.startswith("["):  # the profile's get_observations: a JSON array of records
            n = len(json.loads(text.split("\n\nNot found:")[0]))
        wp = tokens(text)
        sc = json.dumps(result.structured_content, ensure_ascii=False, separators=(",", ":"))
        shown = ", ".join(f"{k}={v}" for k, v in arguments.items() if k != "query")
        out.append({"tool": label + tool, "args": shown,
                    "results": n, "chars": len(text), "wordpiece": wp, "chars/4": len(text) // 4,
                    "per_result_wp": round((wp - header) / n, 1) if n else None,
                    "sc_chars": len(sc), "sc_wordpiece": tokens(sc)})
    return out


if __name__ == "__main__":
    raise SystemExit(main())
