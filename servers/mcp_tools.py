"""The MCP server: memsync's search as tools an agent calls (official ``mcp`` SDK, MCPServer).

Every tool validates through ``servers.params`` and answers in compact markdown
(``servers.render``), with the same answer as structured content under a declared output schema
(``servers.structured``). Every tool has a title and is annotated read-only, idempotent and
closed-world. A refused value comes back as a tool error whose text says what to change; nothing
else of an exception reaches the agent. The tools work without the worker: when
the vector store cannot be reached the answer is full-text only and its header says so. Over
HTTP it listens on ``serve_host`` and answers only allowed ``Host`` and ``Origin`` values, and
with a token set only requests that carry it, by the same rules and settings as the HTTP API
(``servers.hosts``).

Every argument's text is valid Unicode before a tool sees it (an unpaired surrogate becomes
U+FFFD, ``search.request.valid_unicode``), and JSON with an unpaired surrogate escaped in a string
is repaired before the SDK parses it (``servers.wire``): the SDK would refuse the line, and over
stdio leave the request without an answer. Arguments of the wrong type get a one-line message
naming each (:func:`argument_errors`), not pydantic's report.
"""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from importlib.metadata import version
from typing import Annotated, Any, Literal, TypeVar, cast

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings
from mcp.types import CallToolResult, InputRequiredResult, TextContent, ToolAnnotations
from pydantic import BeforeValidator, Field, ValidationError

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.errors import InvalidRequest, MemsyncError, closest
from memsync.config.filters import FILTER_BY_FIELD, FilterParam
from memsync.config.kinds import KindFilter, plural
from memsync.config.limits import MAX_LIMIT
from memsync.config.records import format_ref
from memsync.config.settings import Settings
from memsync.search import QueryTimeout, Response, Searcher
from memsync.search.request import SearchFields, valid_unicode
from memsync.servers import render
from memsync.servers import structured as out
from memsync.servers.hosts import HostGuard, HostRule, TokenGuard, check_binding
from memsync.servers.params import (
    MAX_DEPTH,
    MAX_IDS,
    FindArgs,
    FindBy,
    Requests,
    filter_fields,
    offering_filters,
    parse_ref,
)
from memsync.servers.redact import public
from memsync.servers.wire import RepairedJsonBody, repaired_lines

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("memsync.mcp")


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


def filter_arg(param: FilterParam) -> Any:
    """A filter's MCP argument: one string, or (for a list filter) one or several."""
    kind = str | list[str] | None if param.shape == "list" else str | None
    return Annotated[kind, Field(description=param.help)]


def not_boolean(what: str) -> BeforeValidator:
    """A validator that refuses true and false, alone or in a list, as ``what``: pydantic reads
    them as 1 and 0 for an integer (true was observation #1)."""
    def check(value: Any) -> Any:
        if any(isinstance(v, bool) for v in (value if isinstance(value, list) else [value])):
            raise ValueError(f"{what}, not true or false")
        return value

    return BeforeValidator(check)


AN_ID = not_boolean("a record id (123, #123, S12, P5)")
A_COUNT = not_boolean("an integer")


Query = Annotated[str, Field(description="A few key words or a short question; empty lists the newest records.")]
Project = Annotated[str | None, Field(description=FILTER_BY_FIELD["project"].help)]
WindowDays = Annotated[int | None, A_COUNT, Field(
    description="Recency window in days (default: the server's window, see its instructions); 0 = all time.")]
OrderArg = Annotated[Literal["relevance", "newest", "oldest"], Field(description="Sort order.")]
Limit = Annotated[int, A_COUNT, Field(description=f"Results per page, 1-{MAX_LIMIT}. Start small.")]
Offset = Annotated[int, A_COUNT, Field(description="Results to skip, for the next page.")]
FormatArg = Annotated[Literal["index", "full"], Field(
    description="index: one line per result (cheap); full: whole records (use get_observations instead).")]
KindArg = Annotated[KindFilter, Field(description="Which records.")]
AllArg = Annotated[bool, Field(description="Also list the results below the confidence cutoff (min_confidence).")]



# What a tool returns: a CallToolResult with the markdown as its text and the model as its
# structuredContent. The model named second is the output schema the SDK publishes and checks each
# answer against; a plain model as the return type would make the SDK send its JSON as the text.
SearchAnswer = Annotated[CallToolResult, out.SearchOutput]
TimelineAnswer = Annotated[CallToolResult, out.TimelineOutput]
RecentAnswer = Annotated[CallToolResult, out.RecentOutput]
RecordsAnswer = Annotated[CallToolResult, out.RecordsOutput]
SimilarAnswer = Annotated[CallToolResult, out.SimilarOutput]

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


def build_server(settings: Settings, searcher: Searcher | None = None) -> MCPServer:
    """The MCP server with memsync's tools, on one shared (thread-safe) Searcher."""
    searcher = searcher or Searcher(settings)
    requests = Requests(searcher, settings.max_query_chars)
    mcp: MCPServer = ToolServer("memsync", instructions=instructions(settings.window_days), version=version("memsync"))

    # Off (mcp_structured=false), tools declare no output schema and send the markdown only: Claude
    # Code, opencode and Codex give the model the JSON of structuredContent instead of the text when
    # both are present, about twice the tokens (docs/benchmarks.md, "MCP answers in tokens").
    structured = settings.mcp_structured

    def tool(title: str) -> Callable[[F], F]:
        """Register a tool with its title, the read-only annotations and (when on) its output schema."""
        return mcp.tool(title=title, annotations=READ_ONLY, structured_output=None if structured else False)

    def answer(text: str, data: Callable[[], out.Structured]) -> CallToolResult:
        """A tool's answer: the markdown an agent reads, and (when on) the same answer as structured
        content, built only then."""
        return CallToolResult(content=[TextContent(type="text", text=text)],
                              structured_content=data().content() if structured else None)

    def search_answer(resp: Response, offset: int, full: bool) -> CallToolResult:
        # The degraded reason without the data directory's path (a client sees no file path).
        resp = replace(resp, reason=public(resp.reason, settings))
        return answer(render.search_markdown(resp, offset, full), lambda: out.search_output(resp, offset))

    def run_search(fields: SearchFields) -> CallToolResult:
        with answers(settings):
            return search_answer(requests.search(fields), fields.get("offset", 0), bool(fields.get("full")))

    def run_find(by: FindBy, value: str | list[str], args: FindArgs) -> CallToolResult:
        with answers(settings):
            return search_answer(requests.find_by(by, value, args), args.offset, args.full)

    # Each search tool's filters (project, platform, type, concept, file, date_from, date_to, ...)
    # are declared once, in config.filters: offering_filters adds those of the kinds it searches.
    @tool("Search memory")
    @offering_filters(filter_arg, KINDS)
    def search(query: Query = "", kind: KindArg = "all", window_days: WindowDays = None,
               order: OrderArg = "relevance", limit: Limit = 10, offset: Offset = 0, format: FormatArg = "index",
               all: AllArg = False, **filters: Any) -> SearchAnswer:  # noqa: A002 - the parameter's public name
        """Search all memory (observations, summaries, prompts) by meaning and words.
        Use first when you need anything from past sessions. Each result line has an id (#123,
        #S12, #P5), type, date, score and which signals found it."""
        return run_search(SearchFields(query=query, kind=kind, filters=filter_fields(filters),
                                       window_days=window_days, order=order, limit=limit, offset=offset,
                                       full=format == "full", all=all))

    @tool("Search observations")
    @offering_filters(filter_arg, [Kind.OBSERVATION])
    def search_observations(query: Query = "", window_days: WindowDays = None, order: OrderArg = "relevance",
                            limit: Limit = 10, offset: Offset = 0, format: FormatArg = "index",
                            all: AllArg = False, **filters: Any) -> SearchAnswer:  # noqa: A002
        """Search observations only: what was done, found or decided in past work (bugfixes,
        features, decisions, discoveries), with their files and concepts."""
        return run_search(SearchFields(query=query, kind=plural(Kind.OBSERVATION), filters=filter_fields(filters),
                                       window_days=window_days, order=order, limit=limit, offset=offset,
                                       full=format == "full", all=all))

    # search_sessions and search_user_prompts keep their names from before the kind table made the words
    # "summary" and "prompt": agents' permission lists and prompts name the tools
    # (mcp__memsync__search_sessions), and a second tool under a new name would grow the tool list
    # every session reads. Their titles and texts use the words.
    @tool("Search summaries")
    @offering_filters(filter_arg, [Kind.SUMMARY])
    def search_sessions(query: Query = "", window_days: WindowDays = None, order: OrderArg = "relevance",
                        limit: Limit = 10, offset: Offset = 0, format: FormatArg = "index",
                        all: AllArg = False, **filters: Any) -> SearchAnswer:  # noqa: A002
        """Search summaries: what each past session asked for, learned, completed and left
        as next steps. Good for "where did we leave X"."""
        return run_search(SearchFields(query=query, kind=plural(Kind.SUMMARY), filters=filter_fields(filters),
                                       window_days=window_days, order=order, limit=limit, offset=offset,
                                       full=format == "full", all=all))

    @tool("Search prompts")
    @offering_filters(filter_arg, [Kind.PROMPT])
    def search_user_prompts(query: Query = "", window_days: WindowDays = None, order: OrderArg = "relevance",
                            limit: Limit = 10, offset: Offset = 0, format: FormatArg = "index",
                            all: AllArg = False, **filters: Any) -> SearchAnswer:  # noqa: A002
        """Search what the user asked in past sessions (their prompts, verbatim)."""
        return run_search(SearchFields(query=query, kind=plural(Kind.PROMPT), filters=filter_fields(filters),
                                       window_days=window_days, order=order, limit=limit, offset=offset,
                                       full=format == "full", all=all))

    @tool("Find observations by concept")
    def find_by_concept(concept: Annotated[str, Field(description="A concept tag, e.g. 'how-it-works'.")],
                        query: Query = "", project: Project = None, window_days: WindowDays = None,
                        limit: Limit = 10, offset: Offset = 0, format: FormatArg = "index") -> SearchAnswer:
        """Observations tagged with a concept, ranked by the query's meaning (newest first
        without one). The tag filter comes first, so no tagged observation is missed."""
        return run_find("concept", concept, FindArgs(query, project, window_days, limit, offset, format == "full"))

    @tool("Find records by file")
    def find_by_file(path: Annotated[str, Field(description="A file path or part of one, e.g. 'src/auth.py'.")],
                     query: Query = "", project: Project = None, window_days: WindowDays = None,
                     limit: Limit = 10, offset: Offset = 0, format: FormatArg = "index") -> SearchAnswer:
        """Observations and summaries that read or modified a file (path substring),
        ranked by the query's meaning (newest first without one). Use before editing a file."""
        return run_find("file", path, FindArgs(query, project, window_days, limit, offset, format == "full"))

    @tool("Find observations by type")
    def find_by_type(type: Annotated[str | list[str], Field(
                         description="Observation type(s): bugfix, feature, decision, discovery, refactor, change.")],
                     query: Query = "", project: Project = None, window_days: WindowDays = None,
                     limit: Limit = 10, offset: Offset = 0, format: FormatArg = "index") -> SearchAnswer:
        """Observations of a type (e.g. every bugfix or decision), ranked by the query's meaning
        (newest first without one)."""
        return run_find("type", type, FindArgs(query, project, window_days, limit, offset, format == "full"))

    @tool("Timeline around a record")
    def timeline(anchor: Annotated[str | None, Field(
                     description="123 or #123 (observation), S12 (summary), P5 (prompt), or an ISO time.")] = None,
                 query: Annotated[str | None, Field(
                     description="Instead of an anchor: the best match of this query is the anchor.")] = None,
                 depth_before: Annotated[int, A_COUNT, Field(
                     description=f"Records before the anchor, 0-{MAX_DEPTH}.")] = 5,
                 depth_after: Annotated[int, A_COUNT, Field(
                     description=f"Records after the anchor, 0-{MAX_DEPTH}.")] = 5,
                 project: Project = None) -> TimelineAnswer:
        """What happened around a moment: observations, summaries and prompts mixed, oldest
        first, the anchor marked. Use after a search to see the context of a result."""
        with answers(settings):
            results, key = requests.timeline(anchor, query, depth_before, depth_after, project)
            return answer(render.timeline_markdown(results, key), lambda: out.timeline_output(results, key))

    @tool("Recent context")
    def recent_context(project: Project = None,
                       limit: Annotated[int, A_COUNT, Field(description=f"Records, 1-{MAX_LIMIT}.")] = 10,
                       ) -> RecentAnswer:
        """The newest summaries and observations (of a project), newest first: a quick
        catch-up at the start of a session."""
        with answers(settings):
            results = requests.recent(project, limit)
            return answer(render.recent_markdown(results, project), lambda: out.recent_output(results, project))

    @tool("Get full records")
    def get_observations(ids: Annotated[list[str | int], AN_ID, Field(
            description=f"Up to {MAX_IDS} ids as printed by the other tools: 123/#123, S12/#S12, P5/#P5.")],
    ) -> RecordsAnswer:
        """Full records by id, in the order given (observations, and summaries or prompts by their
        S/P ids). Ids that do not exist are listed at the end."""
        with answers(settings):
            records, missing = requests.get(ids)
            return answer(render.records_markdown(records, missing), lambda: out.records_output(records, missing))

    @tool("Find similar past work")
    def find_similar(observation_id: Annotated[int | str, AN_ID,
                                               Field(description="An observation id: 123 or #123.")],
                     limit: Annotated[int, A_COUNT, Field(description=f"Results, 1-{MAX_LIMIT}.")] = 10,
                     window_days: Annotated[int | None, A_COUNT, Field(
                         description="Only this many recent days; default all time.")] = 0) -> SimilarAnswer:
        """Past work most like one observation, best first; near-duplicates (the same thing
        recorded again) are flagged. Use to check whether something was done before."""
        with answers(settings):
            results, mode, reason = requests.similar(observation_id, limit, window_days)
            reason = public(reason, settings)
            ref = format_ref(*parse_ref(observation_id))
            return answer(render.similar_markdown(ref, results, mode, reason, settings.near_duplicate),
                          lambda: out.similar_output(ref, results, mode, reason, settings.near_duplicate))

    return mcp


PROFILES = ("memsync", "claude-mem")  # memsync's own tools; claude-mem's three search tools


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
    if profile == "claude-mem":
        from memsync.servers.claude_mem_tools import build_profile_server

        server = build_profile_server(settings, searcher)
    else:
        server = build_server(settings, searcher)
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
