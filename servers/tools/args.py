"""The arguments memsync's MCP tools share, each typed and described once: the SDK builds every
tool's input schema from these annotations (and its output schema from the ``*Answer`` types).

A tool module imports the names its signatures use: the annotations are read in the module that
defines the tool (``from __future__ import annotations``), never from a local.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.types import CallToolResult
from pydantic import BeforeValidator, Field

from memsync.config.filters import FILTER_BY_FIELD, FilterParam
from memsync.config.kinds import KindFilter
from memsync.config.limits import MAX_LIMIT
from memsync.servers import structured as out


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
