"""The record tools: full records by id, and the past work most like one observation."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from memsync.config.limits import MAX_IDS, MAX_LIMIT
from memsync.config.records import format_ref
from memsync.servers import render
from memsync.servers import structured as out
from memsync.servers.mcp_boundary import answers
from memsync.servers.params import parse_ref
from memsync.servers.redact import public
from memsync.servers.tools.args import A_COUNT, AN_ID, RecordsAnswer, SimilarAnswer
from memsync.servers.tools.kit import ToolKit


def register(kit: ToolKit) -> None:
    """get_observations and find_similar."""
    settings = kit.settings

    @kit.tool("Get full records")
    def get_observations(ids: Annotated[list[str | int], AN_ID, Field(
            description=f"Up to {MAX_IDS} ids as printed by the other tools: 123/#123, S12/#S12, P5/#P5.")],
    ) -> RecordsAnswer:
        """Full records by id, in the order given (observations, and summaries or prompts by their
        S/P ids). Ids that do not exist are listed at the end."""
        with answers(settings):
            records, missing = kit.requests.get(ids)
            return kit.answer(render.records_markdown(records, missing), lambda: out.records_output(records, missing))

    @kit.tool("Find similar past work")
    def find_similar(observation_id: Annotated[int | str, AN_ID,
                                               Field(description="An observation id: 123 or #123.")],
                     limit: Annotated[int, A_COUNT, Field(description=f"Results, 1-{MAX_LIMIT}.")] = 10,
                     window_days: Annotated[int | None, A_COUNT, Field(
                         description="Only this many recent days; default all time.")] = 0) -> SimilarAnswer:
        """Past work most like one observation, best first; near-duplicates (the same thing
        recorded again) are flagged. Use to check whether something was done before."""
        with answers(settings):
            results, mode, reason = kit.requests.similar(observation_id, limit, window_days)
            reason = public(reason, settings)
            ref = format_ref(*parse_ref(observation_id))
            return kit.answer(render.similar_markdown(ref, results, mode, reason, settings.near_duplicate),
                              lambda: out.similar_output(ref, results, mode, reason, settings.near_duplicate))
