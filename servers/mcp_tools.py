"""The MCP server: memsync's search as tools an agent calls (official ``mcp`` SDK, MCPServer).

Every tool validates through ``servers.params`` and answers in compact markdown
(``servers.render``), with the same answer as structured content under a declared output schema
(``servers.structured``). Every tool has a title and is annotated read-only, idempotent and
closed-world. A refused value comes back as a tool error whose text says what to change; nothing
else of an exception reaches the agent (``servers.mcp_boundary``, shared with the claude-mem
profile). The tools work without the worker: when the vector store cannot be reached the answer
is full-text only and its header says so. Over HTTP it listens on ``serve_host`` and answers
only allowed ``Host`` and ``Origin`` values, and with a token set only requests that carry it, by
the same rules and settings as the HTTP API (``servers.hosts``).

The tools themselves live in ``servers.tools``, one module per family, registered in the order
of ``servers.tools.FAMILIES``; this module builds a server of either profile and serves it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib.metadata import version

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings

from memsync.config.settings import Settings
from memsync.search import Searcher
from memsync.servers.claude_mem_tools import build_profile_server
from memsync.servers.hosts import HostGuard, HostRule, TokenGuard, check_binding
from memsync.servers.mcp_boundary import ToolServer
from memsync.servers.params import Requests
from memsync.servers.tools import FAMILIES, ToolKit
from memsync.servers.wire import RepairedJsonBody


def instructions(window_days: int) -> str:
    """What the server tells an agent about itself; ``window_days`` is the configured window."""
    window = f"the last {window_days} days" if window_days else "all time"
    return f"""memsync searches the coding agent's memory: past observations (#123),
summaries (#S12) and prompts (#P5) it recorded, across all projects unless you pass project
(the project's name, usually its folder's). Search by meaning and by words at once. Short
queries of a few key words work best. Start with a small limit (5-10),
read the one-line results, then open the ones you need with get_observations. Results cover
{window} unless you pass window_days (0 = all time) or a date range; the header says how many
older matches the window left out."""


def build_server(settings: Settings, searcher: Searcher | None = None) -> MCPServer:
    """The MCP server with memsync's tools, on one shared (thread-safe) Searcher."""
    searcher = searcher or Searcher(settings)
    mcp = ToolServer("memsync", instructions=instructions(settings.window_days), version=version("memsync"))
    kit = ToolKit(mcp, settings, Requests(searcher, settings.max_query_chars))
    for register in FAMILIES:
        register(kit)
    return mcp


# Each profile's server: memsync's own tools; claude-mem's three search tools.
PROFILES: dict[str, Callable[[Settings, Searcher], MCPServer]] = {
    "memsync": build_server, "claude-mem": build_profile_server}


# Libraries that log each HTTP call at INFO (the Chroma client's httpx): an MCP client shows the
# server's stderr as its log, where a line per search reads like trouble. Warnings still show.
QUIET_LOGGERS = ("httpx", "httpcore", "chromadb")


def serve(settings: Settings, http_port: int | None = None, profile: str = "memsync") -> None:
    """Serve over stdio, or over streamable HTTP on ``serve_host``:``http_port``; ``profile`` picks the
    tools (``claude-mem``: its search, timeline and get_observations, ``servers.claude_mem_tools``)."""
    host = settings.serve_host
    if http_port is not None:
        check_binding(host, settings)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    searcher = Searcher(settings)
    server = PROFILES.get(profile, build_server)(settings, searcher)
    try:
        if http_port is None:
            server.run("stdio")
        else:
            import uvicorn

            # The SDK's transport security gets the lists of servers.hosts, and HostGuard refuses
            # first with the HTTP API's answer, then TokenGuard without the token: one rule for
            # both servers. Bodies are repaired last, just before the SDK parses them.
            rule = HostRule.of(settings, host, http_port)
            security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=rule.sdk_hosts(),
                                                 allowed_origins=rule.sdk_origins())
            app = server.streamable_http_app(host=host, transport_security=security)
            guarded = HostGuard(TokenGuard(RepairedJsonBody(app, DEFAULT_MAX_REQUEST_BODY_SIZE), settings.bearer_token),
                                rule)
            uvicorn.run(guarded, host=host, port=http_port, log_level=server.settings.log_level.lower())
    finally:
        searcher.close()
