"""The search tools: all of memory, or one kind of record (observations, summaries, prompts).

Each search tool's filters (project, platform, type, concept, file, date_from, date_to, ...) are
declared once, in config.filters: ``offering_filters`` adds those of the kinds it searches.
"""

from __future__ import annotations

from typing import Any

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.kinds import plural
from memsync.search.request import SearchFields
from memsync.servers.params import filter_fields, offering_filters
from memsync.servers.tools.args import (
    AllArg,
    FormatArg,
    KindArg,
    Limit,
    Offset,
    OrderArg,
    Query,
    SearchAnswer,
    WindowDays,
    filter_arg,
)
from memsync.servers.tools.kit import ToolKit


def register(kit: ToolKit) -> None:
    """search, search_observations, search_sessions and search_user_prompts."""

    @kit.tool("Search memory")
    @offering_filters(filter_arg, KINDS)
    def search(query: Query = "", kind: KindArg = "all", window_days: WindowDays = None,
               order: OrderArg = "relevance", limit: Limit = 10, offset: Offset = 0, format: FormatArg = "index",
               all: AllArg = False, **filters: Any) -> SearchAnswer:  # noqa: A002 - the parameter's public name
        """Search all memory (observations, summaries, prompts) by meaning and words.
        Use first when you need anything from past sessions. Each result line has an id (#123,
        #S12, #P5), type, date, score and which signals found it."""
        return kit.run_search(SearchFields(query=query, kind=kind, filters=filter_fields(filters),
                                           window_days=window_days, order=order, limit=limit, offset=offset,
                                           full=format == "full", all=all))

    @kit.tool("Search observations")
    @offering_filters(filter_arg, [Kind.OBSERVATION])
    def search_observations(query: Query = "", window_days: WindowDays = None, order: OrderArg = "relevance",
                            limit: Limit = 10, offset: Offset = 0, format: FormatArg = "index",
                            all: AllArg = False, **filters: Any) -> SearchAnswer:  # noqa: A002
        """Search observations only: what was done, found or decided in past work (bugfixes,
        features, decisions, discoveries), with their files and concepts."""
        return kit.run_search(SearchFields(query=query, kind=plural(Kind.OBSERVATION), filters=filter_fields(filters),
                                           window_days=window_days, order=order, limit=limit, offset=offset,
                                           full=format == "full", all=all))

    # search_sessions and search_user_prompts keep their names from before the kind table made the words
    # "summary" and "prompt": agents' permission lists and prompts name the tools
    # (mcp__memsync__search_sessions), and a second tool under a new name would grow the tool list
    # every session reads. Their titles and texts use the words.
    @kit.tool("Search summaries")
    @offering_filters(filter_arg, [Kind.SUMMARY])
    def search_sessions(query: Query = "", window_days: WindowDays = None, order: OrderArg = "relevance",
                        limit: Limit = 10, offset: Offset = 0, format: FormatArg = "index",
                        all: AllArg = False, **filters: Any) -> SearchAnswer:  # noqa: A002
        """Search summaries: what each past session asked for, learned, completed and left
        as next steps. Good for "where did we leave X"."""
        return kit.run_search(SearchFields(query=query, kind=plural(Kind.SUMMARY), filters=filter_fields(filters),
                                           window_days=window_days, order=order, limit=limit, offset=offset,
                                           full=format == "full", all=all))

    @kit.tool("Search prompts")
    @offering_filters(filter_arg, [Kind.PROMPT])
    def search_user_prompts(query: Query = "", window_days: WindowDays = None, order: OrderArg = "relevance",
                            limit: Limit = 10, offset: Offset = 0, format: FormatArg = "index",
                            all: AllArg = False, **filters: Any) -> SearchAnswer:  # noqa: A002
        """Search what the user asked in past sessions (their prompts, verbatim)."""
        return kit.run_search(SearchFields(query=query, kind=plural(Kind.PROMPT), filters=filter_fields(filters),
                                           window_days=window_days, order=order, limit=limit, offset=offset,
                                           full=format == "full", all=all))
