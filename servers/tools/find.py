"""The find-by tools: records with a concept, a file or an observation type, ranked by a query's
meaning (newest first without one). The filter comes first, so no match is missed."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from memsync.servers.params import FindArgs
from memsync.servers.tools.args import FormatArg, Limit, Offset, Project, Query, SearchAnswer, WindowDays
from memsync.servers.tools.kit import ToolKit


def register(kit: ToolKit) -> None:
    """find_by_concept, find_by_file and find_by_type."""

    @kit.tool("Find observations by concept")
    def find_by_concept(concept: Annotated[str, Field(description="A concept tag, e.g. 'how-it-works'.")],
                        query: Query = "", project: Project = None, window_days: WindowDays = None,
                        limit: Limit = 10, offset: Offset = 0, format: FormatArg = "index") -> SearchAnswer:
        """Observations tagged with a concept, ranked by the query's meaning (newest first
        without one). The tag filter comes first, so no tagged observation is missed."""
        return kit.run_find("concept", concept, FindArgs(query, project, window_days, limit, offset, format == "full"))

    @kit.tool("Find records by file")
    def find_by_file(path: Annotated[str, Field(description="A file path or part of one, e.g. 'src/auth.py'.")],
                     query: Query = "", project: Project = None, window_days: WindowDays = None,
                     limit: Limit = 10, offset: Offset = 0, format: FormatArg = "index") -> SearchAnswer:
        """Observations and summaries that read or modified a file (path substring),
        ranked by the query's meaning (newest first without one). Use before editing a file."""
        return kit.run_find("file", path, FindArgs(query, project, window_days, limit, offset, format == "full"))

    @kit.tool("Find observations by type")
    def find_by_type(type: Annotated[str | list[str], Field(
                         description="Observation type(s): bugfix, feature, decision, discovery, refactor, change.")],
                     query: Query = "", project: Project = None, window_days: WindowDays = None,
                     limit: Limit = 10, offset: Offset = 0, format: FormatArg = "index") -> SearchAnswer:
        """Observations of a type (e.g. every bugfix or decision), ranked by the query's meaning
        (newest first without one)."""
        return kit.run_find("type", type, FindArgs(query, project, window_days, limit, offset, format == "full"))
