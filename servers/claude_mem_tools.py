"""The claude-mem profile of the MCP server (``memsync mcp --profile claude-mem``): claude-mem's
three search tools, answered by memsync.

claude-mem's plugin teaches an agent (its ``mem-search`` skill) a workflow on three tools of its
MCP server: ``search``, then ``timeline``, then ``get_observations``. This server declares those
three as claude-mem 13.25.3 does (names; property names, types and required lists of the input
schemas, taken from its ``mcp-server.cjs``; descriptions in memsync's words) and answers in its
markdown shape (``servers.claude_mem_render``), so a user swaps the search behind the workflow
without new instructions for the agent. claude-mem's other tools are not memsync's job.

Every value claude-mem accepts is accepted; where its meaning hurts a user, the parameter keeps
its name with the meaning a user would expect (each listed in docs/claude-mem.md):

- order: relevance unless ``orderBy`` asks for dates (claude-mem re-sorts its semantic matches by
  date and keeps the newest); a ``search`` without ``query`` lists the newest first;
- the window is memsync's setting (``window_days``); ``dateStart``/``dateEnd`` replace it, and a
  bare ``dateEnd`` day includes that whole day;
- ``get_observations`` also opens the summaries and prompts ``search`` lists, by their printed ids
  (``"#S12"``, ``"#P5"``); a number is always an observation.

Values are checked as memsync's own tools check theirs, each refused in one line that names it,
and all of a call's before any lookup: a boolean is never an id or a count, a number is an
integer (JSON integers exactly: a float would turn 2**63-1 into 2**63), digits are ASCII ones,
and a timeline anchor is an id or a date (words go in ``query``).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import Tool

from memsync.config.limits import MAX_DEPTH, MAX_IDS, MAX_KEPT, MAX_LIMIT, MAX_OFFSET
from memsync.config.records import RecordRefError, parse_iso
from memsync.config.settings import Settings
from memsync.search import Searcher
from memsync.search.request import BadRequest, SearchFields, bounded
from memsync.servers import claude_mem_render as show
from memsync.servers.mcp_boundary import READ_ONLY, ToolServer, answers
from memsync.servers.params import Requests

PROFILE = "claude-mem"
CLAUDE_MEM_VERSION = "13.25.3"  # the release whose tool schemas these are (tests compare with it)
DEFAULT_LIMIT = 20  # claude-mem's
DEFAULT_DEPTH = 5  # the skill's documented default (its server says 3; it answered 10)
KINDS_BY_TYPE = {"observations": "observations", "sessions": "sessions", "prompts": "prompts"}
ORDERS = {"date_desc": "newest", "date_asc": "oldest", "relevance": "relevance"}


def _props(**types: tuple[str, str]) -> dict[str, Any]:
    return {name: {"type": t, "description": d} for name, (t, d) in types.items()}


# The input schemas as claude-mem 13.25.3 declares them: JSON types ("number", not "integer"), no
# required property but get_observations' ids, other properties allowed.
SCHEMAS: dict[str, dict[str, Any]] = {
    "search": {"type": "object", "additionalProperties": True, "properties": _props(
        query=("string", "A few key words or a short question; leave out to list the newest records"),
        limit=("number", f"Max results (default {DEFAULT_LIMIT}, at most {MAX_LIMIT})"),
        project=("string", "Only this project (merged projects included)"),
        platformSource=("string", "Only this agent's memory: claude, codex, cursor, ..."),
        type=("string", "observations, sessions or prompts (default: all); any other value is an "
                        "observation type, as obs_type"),
        obs_type=("string", "Observation type(s), comma-separated: bugfix, feature, decision, discovery, change"),
        dateStart=("string", "From this date: ISO, YYYY-MM-DD or epoch ms (replaces the recency window)"),
        dateEnd=("string", "Up to this date, inclusive: ISO, YYYY-MM-DD or epoch ms"),
        offset=("number", "Results to skip, for the next page"),
        orderBy=("string", "relevance (default with a query), date_desc (default without) or date_asc"))},
    "timeline": {"type": "object", "additionalProperties": True, "properties": _props(
        anchor=("number", "Observation id to center the timeline around"),
        query=("string", "Instead of an anchor: the best match of this query is the anchor"),
        depth_before=("number", f"Records before the anchor (default {DEFAULT_DEPTH}, at most {MAX_DEPTH})"),
        depth_after=("number", f"Records after the anchor (default {DEFAULT_DEPTH}, at most {MAX_DEPTH})"),
        project=("string", "Only this project"))},
    "get_observations": {"type": "object", "additionalProperties": True, "required": ["ids"], "properties": {
        "ids": {"type": "array", "items": {"type": "number"},
                "description": "Observation ids to fetch (required); the #S12 and #P5 ids search prints open "
                               "summaries and prompts"}}},
}
DESCRIPTIONS = {
    "search": "Step 1: Search memory by meaning and words. Returns an index with IDs (#123 observation, "
              "#S12 session summary, #P5 user prompt). Params: query, limit, project, platformSource, type, "
              "obs_type, dateStart, dateEnd, offset, orderBy",
    "timeline": "Step 2: Get context around results. Params: anchor (observation ID) OR query (finds anchor "
                "automatically), depth_before, depth_after, project",
    "get_observations": "Step 3: Fetch full details for filtered IDs. Params: ids (array of observation IDs, "
                        "required; #S12 and #P5 open summaries and prompts), orderBy, limit, project",
}


class ProfileServer(ToolServer):
    """An MCPServer whose tools list claude-mem's input schemas exactly (the SDK would derive its own
    from the Python signatures, which accept a little more: text for numbers, ids as strings)."""

    async def list_tools(self) -> list[Tool]:
        """The registered tools, each with claude-mem's schema and description."""
        tools = await super().list_tools()
        return [t.model_copy(update={"input_schema": copy.deepcopy(SCHEMAS[t.name]),
                                     "description": DESCRIPTIONS[t.name]}) if t.name in SCHEMAS else t for t in tools]


def _digits(text: str) -> bool:
    """Whether ``text`` is ASCII digits (``str.isdigit`` also takes "١٢" and "１２", and int() reads them)."""
    return text.isascii() and text.isdigit()


def whole(value: Any, name: str, default: int, low: int, high: int) -> int:
    """A count claude-mem declares as a JSON number (``20``, ``20.0``, ``"20"``), within bounds."""
    if value is None or value == "":
        return default
    if isinstance(value, str) and _digits(value.strip().removeprefix("-")):
        value = int(value.strip())
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    return bounded(value, name, low, high)


def date_value(value: Any, name: str, end: bool = False) -> datetime | None:
    """``dateStart``/``dateEnd`` as claude-mem takes them: epoch milliseconds (a number or its
    digits), ``YYYY-MM-DD`` or ISO. A bare day as ``dateEnd`` means the end of that day."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise BadRequest(f"{name} must be YYYY-MM-DD, an ISO date-time or epoch milliseconds, got {value!r:.40}")
    text = str(value).strip()
    if isinstance(value, (int, float)) or _digits(text):
        try:
            return datetime.fromtimestamp(int(float(text)) / 1000, UTC)
        except (OverflowError, ValueError, OSError):
            raise BadRequest(f"{name} {text[:40]!r} is not a date") from None
    try:
        when = parse_iso(text)
    except RecordRefError:
        raise BadRequest(f"{name} must be YYYY-MM-DD, an ISO date-time or epoch milliseconds, "
                         f"got {text[:40]!r}") from None
    if end and len(text) == 10:
        when += timedelta(days=1) - timedelta(milliseconds=1)
    return when


def comma_list(*values: Any) -> list[str]:
    """Comma-separated text (or lists of it) as one list, blanks dropped."""
    out: list[str] = []
    for value in values:
        items = value if isinstance(value, list) else [value] if value is not None else []
        out += [p.strip() for item in items for p in str(item).split(",") if p.strip()]
    return out


def record_id(value: Any, name: str) -> str | int:
    """One id of ``get_observations``: a JSON integer (exactly), a whole float, or text (``"12"``,
    ``"#S12"``: ``params`` reads it); a boolean or anything else is refused."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise BadRequest(f"{name} must be a record id (123, \"#S12\", \"#P5\"), got {value!r:.40}")
    return value if isinstance(value, int) else value.strip()


def _epoch(record: dict[str, object]) -> int:
    value = record.get("created_at_epoch")
    return value if isinstance(value, int) else 0


def build_profile_server(settings: Settings, searcher: Searcher | None = None) -> MCPServer:
    """The MCP server of the claude-mem profile, on one shared (thread-safe) Searcher."""
    mcp = ProfileServer("memsync", version=version("memsync"), instructions=(
        "memsync answers claude-mem's search tools: search (an index with #123, #S12 and #P5 ids), then "
        "timeline around a result, then get_observations for the few you need. They search every project "
        "unless you pass project."))
    register(mcp, settings, Requests(searcher or Searcher(settings), settings.max_query_chars))
    return mcp


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchCall:
    """One call of claude-mem's ``search`` as it arrived (any JSON value where claude-mem takes a
    number or a date), by memsync's names for its arguments."""

    query: str | None = None
    limit: Any = None
    project: str | None = None
    platform: str | None = None  # platformSource
    type: str | None = None
    obs_type: str | list[str] | None = None
    date_start: Any = None  # dateStart
    date_end: Any = None  # dateEnd
    offset: Any = None
    order_by: str | None = None  # orderBy
    show_all: bool = False  # all: memsync's own, outside claude-mem's listed schema


def search_text(requests: Requests, call: SearchCall) -> str:
    """The answer of claude-mem's ``search``, its arguments checked as the module's docstring says."""
    text = requests.parser.query(call.query)
    kind = KINDS_BY_TYPE.get((call.type or "").strip().lower())
    types = comma_list(call.obs_type, None if kind or not call.type else call.type)
    # Relevance with a query, newest first without one, unless orderBy asks for dates.
    default = "relevance" if text.strip() else "newest"
    order = ORDERS.get(call.order_by.strip().lower()) if call.order_by else default
    if order is None:
        raise BadRequest(f"orderBy must be relevance, date_desc or date_asc, got {str(call.order_by)[:40]!r}")
    # Every value is checked before the type lookup (which may answer "no such type").
    page = whole(call.limit, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT), whole(call.offset, "offset", 0, 0, MAX_OFFSET)
    start, end = date_value(call.date_start, "dateStart"), date_value(call.date_end, "dateEnd", end=True)
    filters: dict[str, object] = {"project": call.project, "platform": call.platform, "date_from": start,
                                  "date_to": end}
    requests.parser.filters(filters)
    known = set(requests.searcher.observation_types()) if types else set()  # a query, only when filtering
    if types and not known & set(types):
        # claude-mem filters by any type and finds nothing; memsync says which exist.
        return (f'No results found matching "{text or "undefined"}"\n_no observation of type '
                f'{", ".join(types)}; this database has: {", ".join(sorted(known)) or "(no observations)"}_\n')
    filters["types"] = [t for t in types if t in known] or None
    fields = SearchFields(query=text, kind=kind or "all", filters=filters, order=order,
                          limit=page[0], offset=page[1], full=True, all=call.show_all)
    return show.search_text(requests.search(fields), text, by_date=order != "relevance")


def records_text(requests: Requests, ids: Any, order_by: str | None, limit: Any, project: str | None) -> str:
    """The answer of claude-mem's ``get_observations``: the records, of ``project`` only, in date
    order when ``order_by`` asks for it, at most ``limit``."""
    items = ids if isinstance(ids, list) else comma_list(ids) if isinstance(ids, str) else [ids]
    refs = [record_id(value, f"ids[{i}]") for i, value in enumerate(items)]
    direction = ORDERS.get(order_by.strip().lower()) if order_by else None
    if order_by and direction not in ("newest", "oldest"):
        raise BadRequest(f"orderBy must be date_desc or date_asc, got {order_by[:40]!r}")
    most = None if limit in (None, "") else whole(limit, "limit", MAX_IDS, 1, MAX_KEPT)
    records, missing = requests.get(refs)
    wanted = (project or "").strip()
    if wanted:
        records = [r for r in records if wanted in (r.get("project"), r.get("merged_into_project"))]
    if direction:
        records.sort(key=_epoch, reverse=direction == "newest")
    if most is not None:
        records = records[:most]
    return show.records_text(records, missing)


def register(mcp: MCPServer, settings: Settings, requests: Requests) -> None:
    """claude-mem's three tools on ``mcp``: search, timeline, get_observations."""

    def tool(fn: Any) -> Any:
        return mcp.tool(annotations=READ_ONLY, structured_output=False)(fn)

    # Numbers, ids and dates arrive as any JSON value (Any): the SDK's pydantic would turn true into
    # 1 and 2**63-1 into a float; these tools check them themselves, as claude-mem's schema is looser.
    @tool
    def search(query: str | None = None, limit: Any = None, project: str | None = None,
               platformSource: str | None = None, type: str | None = None, obs_type: str | list[str] | None = None,
               dateStart: Any = None, dateEnd: Any = None, offset: Any = None, orderBy: str | None = None,
               all: Any = None) -> str:  # noqa: A002 - memsync's own, outside claude-mem's listed schema
        """Step 1: search memory."""
        with answers(settings):
            return search_text(requests, SearchCall(
                query=query, limit=limit, project=project, platform=platformSource, type=type, obs_type=obs_type,
                date_start=dateStart, date_end=dateEnd, offset=offset, order_by=orderBy, show_all=all is True))

    @tool
    def timeline(anchor: Any = None, query: str | None = None, depth_before: Any = None,
                 depth_after: Any = None, project: str | None = None) -> str:
        """Step 2: records around an observation, or around the best match of a query."""
        with answers(settings):
            if anchor not in (None, ""):
                anchor = record_id(anchor, "anchor")
            before = whole(depth_before, "depth_before", DEFAULT_DEPTH, 0, MAX_DEPTH)
            after = whole(depth_after, "depth_after", DEFAULT_DEPTH, 0, MAX_DEPTH)
            shown_query = None if anchor not in (None, "") else (query or "").strip() or None
            results, key = requests.timeline(None if anchor in (None, "") else str(anchor), query, before, after,
                                             project, full=True)
            if not results:
                return f"No records found around {anchor if shown_query is None else shown_query!r}\n"
            return show.timeline_text(results, key, shown_query, before, after)

    @tool
    def get_observations(ids: Any, orderBy: str | None = None, limit: Any = None,
                         project: str | None = None) -> str:
        """Step 3: full records by id."""
        with answers(settings):
            return records_text(requests, ids, orderBy, limit, project)
