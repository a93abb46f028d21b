"""What every MCP profile shares at the SDK's edge (memsync's tools, ``servers.mcp_tools``, and
claude-mem's, ``servers.claude_mem_tools``): the server class, the read-only annotations, and how
an error becomes the text of a tool error.

Every argument's text is valid Unicode before a tool sees it (an unpaired surrogate becomes
U+FFFD, ``search.request.valid_unicode``), and JSON with an unpaired surrogate escaped in a string
is repaired before the SDK parses it (``servers.wire``): the SDK would refuse the line, and over
stdio leave the request without an answer. Arguments of the wrong type get a one-line message
naming each (:func:`argument_errors`), not pydantic's report. A refused value comes back as a tool
error whose text says what to change; nothing else of an exception reaches the agent.
"""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any, cast

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.stdio import stdio_server
from mcp.types import CallToolResult, InputRequiredResult, ToolAnnotations
from pydantic import ValidationError

from memsync.config.errors import InvalidRequest, MemsyncError, closest
from memsync.config.settings import Settings
from memsync.search import QueryTimeout
from memsync.search.request import valid_unicode
from memsync.servers.redact import public
from memsync.servers.wire import repaired_lines

log = logging.getLogger("memsync.mcp")

# Every tool only reads this project's memory (the claude-mem database and memsync's own index),
# so the same call twice changes nothing and reaches nothing outside. destructiveHint and
# idempotentHint only matter when readOnlyHint is false, but their defaults (destructive, not
# idempotent) are the wrong way round for a client that reads them alone, so they are set too.
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                            open_world_hint=False)


# How the MCP tools translate the error tree (config.errors): the text of the tool error for each
# branch it treats apart ({} is the error's message) and whether file paths are left out of it
# (``servers.redact``; a refused value is the agent's own, echoed as given), the nearest one for
# every error. Anything outside the tree stays on the server.
TOOL_ERRORS: dict[type[MemsyncError], tuple[str, bool]] = {
    InvalidRequest: ("{}", False),
    QueryTimeout: ("the database did not answer in time ({}); try a narrower query", True),
    MemsyncError: ("{}", True),
}


@contextmanager
def answers(settings: Settings | None = None) -> Iterator[None]:
    """Expected failures become tool errors with a readable message (``TOOL_ERRORS``); the rest
    stay on the server."""
    try:
        yield
    except MemsyncError as exc:
        text, redact = closest(exc, TOOL_ERRORS)
        message = public(str(exc), settings) if redact else str(exc)
        raise ToolError(text.format(message) or type(exc).__name__) from None
    except Exception:
        # An unexpected error (an OverflowError) once reached the agent as an empty message.
        log.exception("unexpected error in an MCP tool")
        raise ToolError("internal error (details are in the server's log)") from None


# What pydantic's error types expect, in the words of memsync's own messages.
_EXPECTED = {"string_type": "a string", "int_type": "an integer", "int_parsing": "an integer",
             "int_from_float": "an integer", "float_type": "a number", "float_parsing": "a number",
             "bool_type": "true or false", "bool_parsing": "true or false", "list_type": "a list",
             "dict_type": "an object", "none_required": "null"}


def argument_errors(error: ValidationError) -> str:
    """A tool's arguments refused by type, in one line: each argument (a list item by its index)
    with what it must be and what it got (``limit must be an integer, got 'ten'``)."""
    expected: dict[str, list[str]] = {}
    got: dict[str, str] = {}
    for e in error.errors(include_url=False):
        # ("ids", 0, "float"): the argument, the list item, the union member tried (left out).
        name = str(e["loc"][0]) + "".join(f"[{p}]" for p in e["loc"][1:] if isinstance(p, int))
        if e["type"] == "missing":
            what = "given"
        elif e["type"] == "literal_error":
            what = f"one of {e.get('ctx', {}).get('expected', '')}"
        else:
            what = _EXPECTED.get(e["type"]) or str(e["msg"]).removeprefix("Input should be ").removeprefix(
                "Value error, ")
        expected.setdefault(name, []).append(what)
        got.setdefault(name, "" if e["type"] == "missing" else f", got {repr(e.get('input'))[:40]}")
    return "; ".join(f"{name} must be {' or '.join(dict.fromkeys(whats))}{got[name]}"
                     for name, whats in expected.items())


def _valid_text(value: Any) -> Any:
    """``value`` (JSON: text, numbers, lists, objects) with every text as valid Unicode."""
    if isinstance(value, str):
        return valid_unicode(value)
    if isinstance(value, list):
        return [_valid_text(v) for v in value]
    if isinstance(value, dict):
        return {valid_unicode(str(k)): _valid_text(v) for k, v in value.items()}
    return value


class ToolServer(MCPServer):
    """The SDK's MCPServer with memsync's boundary: arguments' text as valid Unicode, type errors in
    one line, and stdio lines repaired before the SDK parses them (see the module's docstring)."""

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None) -> CallToolResult | InputRequiredResult:
        """The SDK's call, on repaired arguments; a ValidationError of the arguments as one line."""
        try:
            return await super().call_tool(name, _valid_text(arguments), context)
        except ToolError as exc:
            if isinstance(exc, UnexpectedToolError) or not isinstance(exc.__cause__, ValidationError):
                raise
            # The SDK logs the refused fields from the cause, as it did for its own message.
            raise ToolError(f"Error executing tool {name}: {argument_errors(exc.__cause__)}") from exc.__cause__

    async def run_stdio_async(self) -> None:
        """Serve over stdio as the SDK does, each line of stdin repaired first
        (``servers.wire.repaired_lines``). Given a stdin, the SDK leaves fd 0 as it is (it would
        point it at the null device); nothing memsync starts reads it (children get /dev/null)."""
        text = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
        stdin = cast("anyio.AsyncFile[str]", repaired_lines(anyio.wrap_file(text)))
        try:
            async with stdio_server(stdin=stdin) as (read_stream, write_stream):
                await self._lowlevel_server.run(read_stream, write_stream,
                                                self._lowlevel_server.create_initialization_options())
        finally:
            with suppress(ValueError):  # already detached, or a read still under way at exit
                text.detach()  # sys.stdin's buffer is not this wrapper's to close
