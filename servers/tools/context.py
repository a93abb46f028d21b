"""The context tools: what happened around a record or a moment, and the newest records."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from memsync.config.limits import MAX_DEPTH, MAX_LIMIT
from memsync.servers import render
from memsync.servers import structured as out
from memsync.servers.mcp_boundary import answers
from memsync.servers.tools.args import A_COUNT, Project, RecentAnswer, TimelineAnswer
from memsync.servers.tools.kit import ToolKit


def register(kit: ToolKit) -> None:
    """timeline and recent_context."""

    @kit.tool("Timeline around a record")
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
        with answers(kit.settings):
            results, key = kit.requests.timeline(anchor, query, depth_before, depth_after, project)
            return kit.answer(render.timeline_markdown(results, key), lambda: out.timeline_output(results, key))

    @kit.tool("Recent context")
    def recent_context(project: Project = None,
                       limit: Annotated[int, A_COUNT, Field(description=f"Records, 1-{MAX_LIMIT}.")] = 10,
                       ) -> RecentAnswer:
        """The newest summaries and observations (of a project), newest first: a quick
        catch-up at the start of a session."""
        with answers(kit.settings):
            results = kit.requests.recent(project, limit)
            return kit.answer(render.recent_markdown(results, project), lambda: out.recent_output(results, project))
