"""What the MCP tools return besides their markdown: structured content and its output schemas.

Each tool declares one of the models below as its output schema and answers with a
``CallToolResult`` that carries both forms: the compact markdown of ``servers.render`` as the
text, and the same answer as ``structuredContent`` (for programs). Returning the model itself would
make the SDK dump its JSON as the text too, about 2.6 times the tokens an agent then reads.

The structured form holds what the text shows, in machine form: the printed id (``ref``, what
``get_observations`` takes), the kind, the type label, the date (ISO 8601 with offset instead of
local minutes), score and signals on searches, the project, the title as the text cuts it, and
the marks (anchor, near-duplicate). Keys are short and absent values are left out rather than
sent as ``null``: some clients (Claude Code, opencode, Codex) give the model the JSON of
``structuredContent`` instead of the text when both are present, so its size is measured too
(``scripts/bench_tokens.py``, docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from memsync.config.claude_mem.schema import Kind
from memsync.config.records import format_ref
from memsync.search import Mode, Response, Result, Signal
from memsync.servers.render import TITLE_CHARS, one_line, type_label

Mark = Literal["anchor", "near_duplicate"]
Source = Literal["window", "date_range", "all_time"]


class Structured(BaseModel):
    """The base of the output models: frozen, dumped without absent values."""

    model_config = ConfigDict(frozen=True)

    def content(self) -> dict[str, Any]:
        """The JSON object sent as ``structuredContent``: absent values left out, not ``null``."""
        return self.model_dump(mode="json", exclude_none=True)


class Hit(Structured):
    """One result row, as the markdown table shows it."""

    ref: str = Field(description="The printed id: #123 observation, #S12 summary, #P5 prompt.")
    kind: Kind
    type: str = Field(description="The observation's type, else the kind.")
    date: str | None = Field(None, description="When it was recorded, ISO 8601 with offset.")
    project: str | None = None
    score: float | None = Field(None, description="Searches: the confidence, the calibrated chance in 0..1 that "
                                "the result is relevant (4 decimals); absent in date order.")
    fused: float | None = Field(None, description="Searches: the fused rank score the order started from.")
    found_by: Signal | None = Field(None, description="Searches: which signals found it.")
    similarity: float | None = Field(None, description="Cosine of the best matching field, when semantic found it.")
    title: str = Field(description=f"One line, cut at {TITLE_CHARS} characters as in the text.")
    mark: Mark | None = Field(None, description="The timeline's anchor, or a "
                                                             "near-duplicate in find_similar.")
    record: dict[str, Any] | None = Field(None, description="format=full: the whole record.")


class Window(Structured):
    """The time range a search covered."""

    source: Source
    days: int = Field(description="The recency window in days; 0 with a date range or all time.")
    start: str | None = Field(None, description="ISO 8601; absent = no lower bound.")
    end: str | None = Field(None, description="ISO 8601; absent = now.")


class Coverage(Structured):
    """During a first sync: the part of the search's scope not yet searchable by meaning."""

    from_date: str = Field(description="ISO 8601 (UTC): every row after it is searchable by meaning.")
    missing_share: float = Field(description="Share of the rows searched that are not embedded yet.")
    missing_rows: int


class SearchOutput(Structured):
    """A search or find_by_* answer: how it was produced, the page and its rows."""

    mode: Mode
    reason: str | None = Field(None, description="Why the mode is degraded (lexical_fallback).")
    window: Window
    excluded_by_window: int = Field(description="Matches older than the window (window_days=0 includes them).")
    coverage: Coverage | None = Field(None, description="Absent unless a first sync has not yet embedded part "
                                                        "of what was searched (full-text search covers it).")
    total: int | None = Field(None, description="Matches that passed the confidence cutoff, before paging; "
                              "absent when unknown.")
    below_cutoff: int = Field(0, description="Matches left out for a confidence under min_confidence "
                              "(all=true lists them).")
    offset: int
    next_offset: int | None = Field(None, description="The offset of the next page; absent on the last one.")
    results: list[Hit]


class TimelineOutput(Structured):
    """Records around an anchor, oldest first."""

    anchor: str = Field(description="The anchor's printed id; its row is marked `anchor`.")
    results: list[Hit]


class RecentOutput(Structured):
    """The newest summaries and observations, newest first."""

    project: str | None = None
    results: list[Hit]


class SimilarOutput(Structured):
    """Past work like one observation, best first."""

    observation: str = Field(description="The observation compared against (#123).")
    mode: Mode
    reason: str | None = None
    near_duplicate_at: float = Field(description="Cosine at or above which a row is marked near_duplicate.")
    results: list[Hit]


class FullRecord(Structured):
    """A whole record: its printed id and kind, then every field of the row."""

    model_config = ConfigDict(frozen=True, extra="allow")

    ref: str
    kind: Kind


class RecordsOutput(Structured):
    """Full records in the requested order, and the ids that do not exist."""

    records: list[FullRecord]
    missing: list[str] = Field(description="Requested ids with no record.")


def iso(epoch_ms: int | None) -> str | None:
    """An epoch in milliseconds as ISO 8601 with the local offset, seconds precision."""
    return datetime.fromtimestamp(epoch_ms / 1000).astimezone().isoformat(timespec="seconds") if epoch_ms else None


def hit(r: Result, scored: bool = True) -> Hit:
    """One result; ``scored`` as in ``render.table`` (searches, not listings)."""
    return Hit(ref=format_ref(r.kind, r.id), kind=r.kind, type=type_label(r.kind, r.type),
               date=iso(r.created_at_epoch), project=r.project or None,
               score=round(r.score, 4) if scored and r.score is not None else None,
               fused=round(r.fused, 4) if scored and r.fused is not None else None,
               found_by=r.signals if scored else None,
               similarity=round(r.similarity, 4) if scored and r.similarity is not None else None,
               title=one_line(r.title, TITLE_CHARS),
               mark=cast(Mark, r.field) if r.field in ("anchor", "near_duplicate") else None, record=r.record)


def search_output(resp: Response, offset: int) -> SearchOutput:
    """A search response; ``next_offset`` by the rule of the text's ``More:`` line."""
    w = resp.window
    n = len(resp.results)
    more = n > 0 and (resp.total is None or offset + n < resp.total)
    window = Window(source=cast(Source, w.source), days=w.days, start=iso(w.start_ms), end=iso(w.end_ms))
    return SearchOutput(mode=resp.mode, reason=resp.reason, window=window,
                        excluded_by_window=resp.excluded_by_window,
                        coverage=None if resp.coverage is None else Coverage(**resp.coverage.to_json()),
                        total=resp.total, below_cutoff=resp.below_cutoff, offset=offset,
                        next_offset=offset + n if more else None, results=[hit(r) for r in resp.results])


def timeline_output(results: Sequence[Result], anchor: tuple[Kind, int]) -> TimelineOutput:
    """A timeline: listing rows (project, no score), the anchor marked."""
    return TimelineOutput(anchor=format_ref(*anchor), results=[hit(r, scored=False) for r in results])


def recent_output(results: Sequence[Result], project: str | None) -> RecentOutput:
    """The newest records: listing rows."""
    return RecentOutput(project=project or None, results=[hit(r, scored=False) for r in results])


def similar_output(observation: str, results: Sequence[Result], mode: str, reason: str | None,
                   threshold: float) -> SimilarOutput:
    """Past work like an observation: scored rows, near-duplicates marked."""
    return SimilarOutput(observation=observation, mode=Mode(mode), reason=reason, near_duplicate_at=threshold,
                         results=[hit(r) for r in results])


def records_output(records: Sequence[dict[str, Any]], missing: Sequence[str]) -> RecordsOutput:
    """Full records (each row as the library returns it, plus its printed id) and the missing ids."""
    return RecordsOutput(records=[FullRecord.model_validate({**r, "ref": format_ref(Kind(r["kind"]), int(r["id"]))})
                                  for r in records], missing=list(missing))
