"""What every tool of memsync's MCP profile is given: the server to register on, the settings, the
validated requests (``servers.params``), and how an answer is made (markdown, plus the same
answer as structured content when ``mcp_structured`` is on)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent

from memsync.config.settings import Settings
from memsync.search import Response
from memsync.search.request import SearchFields
from memsync.servers import render
from memsync.servers import structured as out
from memsync.servers.mcp_boundary import READ_ONLY, answers
from memsync.servers.params import FindArgs, FindBy, Requests
from memsync.servers.redact import public

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class ToolKit:
    """One server's tools' shared state: register with :meth:`tool`, answer with :meth:`answer`."""

    mcp: MCPServer
    settings: Settings
    requests: Requests

    @property
    def structured(self) -> bool:
        """Whether answers carry structured content under an output schema. Off (mcp_structured=false),
        tools declare no output schema and send the markdown only: Claude Code, opencode and Codex
        give the model the JSON of structuredContent instead of the text when both are present, about
        twice the tokens (docs/benchmarks.md, "MCP answers in tokens")."""
        return self.settings.mcp_structured

    def tool(self, title: str) -> Callable[[F], F]:
        """Register a tool with its title, the read-only annotations and (when on) its output schema."""
        return self.mcp.tool(title=title, annotations=READ_ONLY, structured_output=None if self.structured else False)

    def answer(self, text: str, data: Callable[[], out.Structured]) -> CallToolResult:
        """A tool's answer: the markdown an agent reads, and (when on) the same answer as structured
        content, built only then."""
        return CallToolResult(content=[TextContent(type="text", text=text)],
                              structured_content=data().content() if self.structured else None)

    def search_answer(self, resp: Response, offset: int, full: bool) -> CallToolResult:
        """A page of search results as a tool's answer."""
        # The degraded reason without the data directory's path (a client sees no file path).
        resp = replace(resp, reason=public(resp.reason, self.settings))
        return self.answer(render.search_markdown(resp, offset, full), lambda: out.search_output(resp, offset))

    def run_search(self, fields: SearchFields) -> CallToolResult:
        """Validate and run one search (``search.request``), errors as tool errors."""
        with answers(self.settings):
            return self.search_answer(self.requests.search(fields), fields.get("offset", 0), bool(fields.get("full")))

    def run_find(self, by: FindBy, value: str | list[str], args: FindArgs) -> CallToolResult:
        """Validate and run one find-by request, errors as tool errors."""
        with answers(self.settings):
            return self.search_answer(self.requests.find_by(by, value, args), args.offset, args.full)
